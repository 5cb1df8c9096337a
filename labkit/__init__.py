"""labkit: the library behind the lab's notebooks.

Modules, one concept each: ``dist`` (process-group setup), ``launch`` (torchrun on simulated or
real nodes), ``magic`` (the ``%%torchrun`` cell magic), ``services`` (embedded Redis and NATS),
``course`` (the papermill runner), ``doctor`` (what this machine has), ``bench`` (measurements).

In a notebook: ``%load_ext labkit`` enables ``%%torchrun`` (and warm ranks: ``%torchrun_start``).
"""

from __future__ import annotations

from labkit.errors import LabkitError
from labkit.runtime.publish import publish

__all__ = ["LabkitError", "publish", "load_ipython_extension"]
__version__ = "0.1.0"


def load_ipython_extension(ipython) -> None:  # noqa: ANN001 (IPython's own type)
    """``%load_ext labkit`` (or the lab's kernels, at start): registers ``%%torchrun``,
    ``%torchrun_start`` and ``%torchrun_stop``."""
    from labkit.runtime.magic import register

    register(ipython)
