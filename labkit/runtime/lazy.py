"""A folder's surface that imports a name only when it is first used.

A topic's ``__init__`` maps each name it exports to the module that defines it and hands the
map to :func:`lazy_surface`; importing one module of the folder (a rank script, a ``python -m``
child) then imports none of its siblings, and a driver never pulls in torch by accident.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_surface(package: str, home: Mapping[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``name`` is imported from
    ``home[name]`` on first use and kept in the package's namespace."""

    def __getattr__(name: str) -> Any:
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *home})

    return __getattr__, __dir__
