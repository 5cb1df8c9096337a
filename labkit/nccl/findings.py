"""What the checker reports: ``Finding`` (to show) and ``Edit`` (how ``render_exports`` fixes
it). Every finding names the source that backs it (``source``: a doc section, a source line)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["error", "warning", "info"]
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Edit:
    """A rewrite of one ``export`` line: drop it, comment it out, set a new value, or rename it."""

    action: Literal["drop", "comment", "set", "rename"]
    value: str = ""  # the new value (set) or the new name (rename)
    reason: str = ""  # short, goes into the comment next to the line


@dataclass
class Finding:
    """One thing the checker noticed about one variable, with the fix in words and its source."""

    severity: Severity
    variable: str
    message: str
    fix: str
    edit: Edit | None = field(default=None, compare=False, repr=False)
    source: str = field(default="", compare=False)
    advice: bool = field(default=False, compare=False, repr=False)
    """Advice about a good value (debug-only, for bring-up), not a fault: a setting read loosely
    from prose (``labkit.nccl.loose``) does not get it."""

    def to_dict(self) -> dict[str, str]:
        return {"severity": self.severity, "variable": self.variable, "message": self.message,
                "fix": self.fix, "source": self.source}


def error(variable: str, message: str, fix: str, edit: Edit | None = None, *,
          source: str = "") -> Finding:
    return Finding("error", variable, message, fix, edit, source)


def warning(variable: str, message: str, fix: str, edit: Edit | None = None, *,
            source: str = "", advice: bool = False) -> Finding:
    return Finding("warning", variable, message, fix, edit, source, advice)


def info(variable: str, message: str, fix: str = "", edit: Edit | None = None, *,
         source: str = "") -> Finding:
    return Finding("info", variable, message, fix, edit, source)
