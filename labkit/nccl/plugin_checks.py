"""Checks that depend on the network plugin a config uses (``Context.plugins``).

With aws-ofi-nccl or GCP's TCPX/TCPXO the traffic does not go through NCCL's IB verbs transport,
so ``NCCL_IB_*`` settings have no effect (aws-ofi-nccl reads no ``NCCL_IB_*``; its own
variables and libfabric's choose the NICs). What aws-ofi-nccl's EFA guide says of libfabric and
rdma-core variables is reported as it says it (``registry_plugins.EFA_ADVICE``).
"""

from __future__ import annotations

from labkit.nccl.context import Context
from labkit.nccl.findings import Finding, info, warning
from labkit.nccl.registry_plugins import EFA_ADVICE, EFA_DOC
from labkit.nccl.variable import Variable

HANDLED_ELSEWHERE = {"NCCL_IB_HCA", "NCCL_IB_DISABLE"}  # hostfacts.ib_hca, rules


def check(var: Variable, value: str, ctx: Context) -> list[Finding] | None:
    """Findings that replace the usual value check, or None to run it."""
    advice = EFA_ADVICE.get(var.name)
    if advice is not None:
        severity, text = advice
        make = warning if severity == "warning" else info
        return [make(var.name, f"aws-ofi-nccl's EFA guide: {text}", "", source=EFA_DOC)]
    replaced = ctx.ib_replaced
    if replaced and var.owner == "nccl" and var.name.startswith("NCCL_IB_") \
            and var.name not in HANDLED_ELSEWHERE:
        return [info(var.name, f"no effect here: {replaced.plugin.title} carries the traffic "
                     f"({replaced.evidence}), not NCCL's IB verbs transport that reads "
                     f"{var.name}", source=replaced.plugin.source)]
    return None
