"""Kinds and choices of variables NCCL's source reads but its env page does not list, whose values
are names or a few integers (else ``registry`` would make them plain integers or strings); each
with the line of NCCL 2.30.7's source that gives its domain (checks: ``labkit.nccl.domains``,
and ``labkit.nccl.pasted`` for the file and library names).
"""

from __future__ import annotations

from labkit.nccl.variable import NCCL_GITHUB

MERGE_LEVELS = ("LOC", "PORT", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
# name -> (kind, values, choices, meaning, where its domain is in the source)
SOURCE_VARIABLES: dict[str, tuple[str, str, tuple[str, ...], str, str]] = {
    "NCCL_SHM_LOCALITY": ("int-enum", "1 (sender side) or 2 (receiver side)", ("1", "2"),
                          "which side of a shared-memory connection holds the buffer",
                          NCCL_GITHUB + "src/transport/shm.cc#L293-L303"),
    "NCCL_PAT_ENABLE": ("int-enum", "0, 1 or 2 (auto)", ("0", "1", "2"),
                        "use the PAT algorithm (one GPU per node)",
                        NCCL_GITHUB + "src/graph/tuning.cc#L215-L223"),
    "NCCL_NET_MERGE_LEVEL": ("enum", ", ".join(MERGE_LEVELS) + " (compared as a prefix, "
                             "case-sensitively)", MERGE_LEVELS,
                             "largest distance at which NICs are merged into one virtual NIC",
                             NCCL_GITHUB + "src/graph/topo.cc#L1738-L1746"),
    "NCCL_GIN_PLUGIN": ("library", "comma list of plugin libraries or suffixes, or none", (),
                        "which GIN plugin libraries NCCL loads",
                        NCCL_GITHUB + "src/plugin/gin.cc#L203-L229"),
    "NCCL_RMA_PLUGIN": ("library", "comma list of plugin libraries or suffixes, or none", (),
                        "which RMA plugin libraries NCCL loads",
                        NCCL_GITHUB + "src/plugin/rma.cc#L166-L191"),
    "NCCL_IBVERBS_LIB": ("library", "a libibverbs library name or path", (),
                         "the libibverbs NCCL opens before libibverbs.so / libibverbs.so.1",
                         NCCL_GITHUB + "src/misc/ibvsymbols.cc#L78-L86"),
    "NCCL_GRAPH_FILE": ("input-path", "an XML graph file (as NCCL_GRAPH_DUMP_FILE writes)", (),
                        "load the rings and trees from this file instead of searching",
                        NCCL_GITHUB + "src/graph/xml.cc#L1254-L1258"),
    "NCCL_GRAPH_DUMP_FILE": ("path", "file to write", (), "dump the searched graphs as XML",
                             NCCL_GITHUB + "src/graph/search.cc#L1353-L1361"),
}
