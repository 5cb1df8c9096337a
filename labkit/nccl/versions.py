"""Which NCCL release a check targets (``NcclTarget``), and how to find the one used here.

    target = NcclTarget.parse("2.21.5", "--nccl-version")
    target = local_nccl_target()  # nvidia-nccl-cu* wheel, torch.cuda.nccl.version(), or newest

Without a choice the target is the newest release the registry read from NCCL's source.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
from dataclasses import dataclass

from labkit.errors import ParameterError
from labkit.nccl.registry import NEWEST_NCCL
from labkit.nccl.variable import version_tuple

NEWEST_SOURCE = "the newest release whose source this checker read; --nccl-version picks another"


@dataclass(frozen=True)
class NcclTarget:
    """An NCCL release to check against, and where that choice came from."""

    version: tuple[int, int, int]
    source: str

    @classmethod
    def newest(cls) -> NcclTarget:
        return cls(version_tuple(NEWEST_NCCL), NEWEST_SOURCE)  # type: ignore[arg-type]

    @classmethod
    def parse(cls, text: str | int | tuple[int, ...], source: str) -> NcclTarget:
        """Accept "2.21.5", "v2.21.5-1", "2.21.5+cuda12.4", "2.21", 22105 or (2, 21, 5)."""
        return cls(_parse(text), source)

    @property
    def text(self) -> str:
        return ".".join(str(part) for part in self.version)

    def describe(self) -> str:
        return f"NCCL {self.text}, {self.source}"

    def at_least(self, release: str) -> bool:
        return self.version >= version_tuple(release)


def _parse(value: str | int | tuple[int, ...]) -> tuple[int, int, int]:
    if isinstance(value, tuple):
        parts = [int(p) for p in value] + [0, 0]
        return parts[0], parts[1], parts[2]
    if isinstance(value, int) or str(value).isdigit():
        code = int(value)  # NCCL_VERSION_CODE: X*10000+Y*100+Z since 2.9, X*1000+Y*100+Z before
        base = 10000 if code >= 20900 else 1000
        major, rest = code // base, code % base
        return major, rest // 100, rest % 100
    match = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+.].*)?", str(value).strip())
    if not match:
        raise ParameterError(f"--nccl-version {value!r}: expected a release like 2.21.5")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def local_nccl_target() -> NcclTarget:
    """The NCCL this machine's PyTorch loads: the nvidia-nccl wheel's version (what a pip-installed
    torch loads), else what ``torch.cuda.nccl.version()`` reports, else the newest release."""
    for dist in ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"):
        try:
            return NcclTarget.parse(importlib.metadata.version(dist), f"the {dist} package here")
        except (importlib.metadata.PackageNotFoundError, ParameterError):
            continue
    torch = sys.modules.get("torch")
    if torch is None and importlib.util.find_spec("torch") is not None:
        import torch  # a second or two, only when checking this machine without a wheel to read
    if torch is not None:
        try:
            return NcclTarget.parse(torch.cuda.nccl.version(), "torch.cuda.nccl.version() here")
        except (AttributeError, RuntimeError, ParameterError, TypeError):
            pass
    return NcclTarget.newest()
