"""``Variable`` and ``Bounds``: what the registry knows about one environment variable, as data.

Versions are NCCL release strings ("2.24.3"); ``introduced`` / ``removed`` come from NCCL's source
(``registry_nccl_source``), ``deprecated`` from NCCL's env docs. Every entry carries ``doc`` (where
its meaning is documented) and ``source`` (where the facts the checker states come from).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Owner = Literal["nccl", "pytorch", "gloo", "torchrun", "plugin"]
OutOfRange = Literal["reject", "clamp", "infinite", "keep-default", "accepted"]

NCCL_DOC = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
NCCL_GITHUB = "https://github.com/NVIDIA/nccl/blob/v2.30.7-1/"
TORCH_NCCL_DOC = "https://docs.pytorch.org/docs/stable/torch_nccl_environment_variables.html"
TORCH_GITHUB = "https://github.com/pytorch/pytorch/blob/main/"
TORCH_HEADER = TORCH_GITHUB + "torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp"
DIST_DOC = "https://docs.pytorch.org/docs/stable/distributed.html"
RUN_DOC = "https://docs.pytorch.org/docs/stable/elastic/run.html"
ENV_INIT_DOC = f"{DIST_DOC}#environment-variable-initialization"


@dataclass(frozen=True)
class Bounds:
    """The range NCCL (or PyTorch) accepts, and what it does outside it.

    ``below`` / ``above`` say what happens to values under ``low`` / over ``high``: rejected
    (init fails or the value is not used), clamped to the bound, read as infinite, ignored
    in favour of the default, or accepted although undocumented. ``high_before`` gives an
    older upper bound: ``("2.25", 32)`` means 32 before NCCL 2.25.
    """

    low: int | None
    high: int | None
    below: OutOfRange = "reject"
    above: OutOfRange = "reject"
    high_before: tuple[str, int] | None = None
    source: str = ""

    def high_at(self, version: tuple[int, ...]) -> int | None:
        """The upper bound for a target NCCL version."""
        if self.high_before and version < tuple(int(p) for p in self.high_before[0].split(".")):
            return self.high_before[1]
        return self.high


@dataclass(frozen=True)
class Variable:
    """One environment variable: who reads it, what it accepts, since when, and where that is
    documented."""

    name: str
    owner: Owner
    kind: str  # bool, int, enum, ifname-list, hca-list, algo-list, proto-list, path, level, str...
    values: str  # accepted values or syntax, as the docs state them
    default: str
    debug_only: bool  # listed under NCCL's "Debugging": not for production scripts
    deprecated_by: str | None
    meaning: str
    doc: str
    choices: tuple[str, ...] = ()  # for enums: the accepted tokens (compared case-insensitively)
    introduced: str | None = None  # first NCCL release whose source reads it (None: 2.3.5 or older)
    deprecated: str | None = None  # release NCCL's docs deprecate it (or deprecated_values) in
    deprecated_values: tuple[str, ...] = ()  # only these values are deprecated (upper case)
    removed: str | None = None  # first NCCL release that no longer reads it
    bounds: Bounds | None = None
    source: str = ""  # where the facts come from (source line, header, vendor page)
    plugin: str = ""  # for owner "plugin": which plugin or library reads it
    documented: bool = True  # False: read by the source but not on the documented list
    successor: str = ""  # what replaces it where it is not a plain rename (as its docs say)

    @property
    def link(self) -> str:
        """The most specific reference for this variable: its source, else its doc."""
        return self.source or self.doc


def version_tuple(text: str) -> tuple[int, ...]:
    """``"2.24.3"`` -> ``(2, 24, 3)``."""
    return tuple(int(part) for part in text.split("."))
