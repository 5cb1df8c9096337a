"""Names whose ``NCCL_`` prefix is mangled: ``CCL_NET_GDR_LEVEL``, ``NCL_DEBUG``, ``NCLL_...``,
``NNCL_...``, ``NCCCL_...``, ``nccl_debug``: an NCCL variable's rest behind a prefix one letter off
``NCCL_`` (a letter lost, doubled, added, changed or swapped), or in other letter case.

NCCL reads each variable by its exact name (``ncclGetEnv``, ``NCCL_GET_ENV``, asks the env plugin,
whose default calls ``std::getenv(name)``, ``NCCL_DEFAULT_ENV``), and POSIX keeps lower-case names
apart from upper-case ones (a namespace reserved for applications: ``POSIX_ENV``), so such a line
sets nothing NCCL reads, and the intended setting is lost. A prefix that does not start with
``N`` is not taken for a mangle: other vendors' collective libraries read such names of their own
(AMD's ``RCCL_``; Huawei's HCCL reads ``HCCL_BUFFSIZE``, ``HCCL_DOC``). The exception is ``CCL_``,
NCCL without its ``N``, which is also Intel oneCCL's prefix: a ``CCL_`` name oneCCL reads
(``labkit.nccl.registry_oneccl``) is oneCCL's, not a typo. Only the prefix may be off: the rest
must be, letter for letter (case aside), the rest of a name the registry knows (``NCCL_`` names
of NCCL, PyTorch's legacy ``NCCL_`` aliases, plugins' ``NCCL_IBEXT_``/``NCCL_SHARP_`` ...).

``LOOSE`` is the regex of the upper-case ones, for the loose net (``labkit.nccl.loose``): in prose
a lower-case ``nccl_debug=1`` is as likely a Python keyword argument as an environment variable.
"""

from __future__ import annotations

from labkit.nccl.registry import REGISTRY
from labkit.nccl.registry_oneccl import is_oneccl

NCCL_GET_ENV = "https://github.com/NVIDIA/nccl/blob/v2.30.7-1/src/misc/param.cc#L108-L111"
NCCL_DEFAULT_ENV = "https://github.com/NVIDIA/nccl/blob/v2.30.7-1/src/plugin/env/default_env.cc#L22"
POSIX_ENV = "https://pubs.opengroup.org/onlinepubs/9699919799/basedefs/V1_chap08.html"
HCCL_DOC = ("https://www.hiascend.com/document/detail/zh/canncommercial/800/apiref/envvar/"
            "envref_07_0080.html")
PREFIX = "NCCL"
# Prefixes one letter off NCCL (or NCCL itself, for another letter case), upper case: the lost N
# (CCL), a lost C (NCL), a lost L (NCC), a changed letter after the N, one added after the N, the
# last two letters swapped (NCLC). Candidates only: ``intended`` checks the rest.
LOOSE = (r"(?:CCL|NCL|NCC|N[A-Z]CL|NC[A-Z]L|NCC[A-Z]|N[A-Z]CCL|NC[A-Z]CL|NCC[A-Z]L|NCCL[A-Z]"
         r"|NCLC)_[A-Z0-9_]*[A-Z0-9]")


def intended(name: str) -> str | None:
    """The registry's ``NCCL_`` name that ``name`` mangles (see the module docstring), or None
    when ``name`` is no such mangle (a real name, another library's, or an unknown rest)."""
    prefix, sep, rest = name.partition("_")
    if not sep or not rest:
        return None
    upper = prefix.upper()
    if not (upper == PREFIX or upper == "CCL" or upper[:1] == "N" and _one_off(upper)):
        return None
    candidate = f"{PREFIX}_{rest.upper()}"
    if candidate == name or candidate not in REGISTRY or is_oneccl(name):
        return None
    return candidate


def _one_off(prefix: str) -> bool:
    """Whether ``prefix`` is NCCL with one letter lost, added, changed, or two swapped."""
    if abs(len(prefix) - len(PREFIX)) > 1 or prefix == PREFIX:
        return False
    if len(prefix) == len(PREFIX):
        diff = [i for i, (a, b) in enumerate(zip(prefix, PREFIX, strict=True)) if a != b]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1 and
                                  prefix[diff[0]] == PREFIX[diff[1]] and
                                  prefix[diff[1]] == PREFIX[diff[0]])
    short, long = sorted((prefix, PREFIX), key=len)
    return any(long[:i] + long[i + 1:] == short for i in range(len(long)))
