"""How sure a read is of a value, and the one place where that caps a finding's severity.

An error (exit 1) says a setting is wrong on any host. That claim rests on two things: the checks
of the value (``values``, ``torch_values``, ``rules``) and the read that produced the value. The
checks are only as good as the read, and some reads are sure of what they took:

- a shell word, a Python or JSON literal, a Kubernetes ``value:``, a YAML scalar whose text is
  a plain scalar, NCCL's own log line: the value is exactly what the process gets;
- reads that take the rest of a line as the value without parsing a language around it (a YAML
  ``NAME: value`` line, a pair in prose, a cell of a table: ``UNSURE_SHAPES``) are sure only
  when that rest is a plain scalar. When it carries another language's syntax (an assignment
  such as ``str = "INFO"`` or ``a=1,B=2``, quotes that never close, a call such as
  ``os.getenv("X", "1")``), the line most likely is not the shape it was read as (a Python
  field taken for YAML, a comma-joined option list taken for one value), and what looks like a
  wrong value is a misreading. Such a value is kept (the reader may still learn something
  from it), but every finding on it is at most a warning, saying why.
- a loose read (``labkit.nccl.loose``) may be a description rather than a setting: never above
  a warning either, whatever its value.

``doubts`` finds the unsure values of a parse, ``capped`` applies them in ``check.check_env``,
and ``at_most_warning`` is the one way a finding is lowered, for both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from labkit.nccl.findings import Finding, warning

UNSURE_SHAPES = frozenset({"yaml env", "in prose", "markdown table"})
# A name (a type, a variable, a subscript) then "=": an assignment, not a value; a leading "="
# (NCCL's exact-match prefix, "=mlx5_0") and "==" are not one.
_ASSIGNMENT = re.compile(r"(?:^|[\s,;(\[{])[A-Za-z_][\w.]*(?:\[[^\][]*\])?\s*=(?!=)|\]\s*=(?!=)")
_CALL = re.compile(r"(?:^|[\s=,(\[{])[A-Za-z_][\w.]*\(")  # os.getenv(, str(: not $(cmd)


@dataclass(frozen=True)
class Doubt:
    """A variable whose value was read from ``line`` in an unsure shape and carries syntax of
    another language (``why``)."""

    name: str
    value: str
    line: int
    shape: str
    why: str

    def reason(self) -> str:
        return (f"read from line {self.line} as {self.shape}, the value {self.value!r} carries "
                f"{self.why}, so the line may be written in another language")


class _Read(Protocol):
    """What ``doubts`` needs of an assignment (``labkit.nccl.parsed.Assignment``)."""

    @property
    def name(self) -> str: ...
    @property
    def value(self) -> str | None: ...
    @property
    def line(self) -> int: ...
    @property
    def shape(self) -> str: ...


def foreign_syntax(value: str) -> str:
    """What in ``value`` belongs to another language's syntax, in a few words, or "" when it is
    a plain scalar."""
    if _ASSIGNMENT.search(value):
        return "an assignment ('name = ...')"
    if _CALL.search(value):
        return "a call"
    for quote in "\"'`":
        if value.count(quote) % 2:
            return f"a {quote} that never closes"
    return ""


def doubts(assignments: Iterable[_Read], env: Mapping[str, str]) -> tuple[Doubt, ...]:
    """The variables of ``env`` whose value comes from an unsure read (``UNSURE_SHAPES``) and
    carries another language's syntax; ``assignments``: the parse's, in order."""
    found: dict[str, Doubt] = {}
    for a in assignments:
        if a.value is None or env.get(a.name) != a.value:
            continue
        why = foreign_syntax(a.value) if a.shape in UNSURE_SHAPES else ""
        if why:
            found[a.name] = Doubt(a.name, a.value, a.line, a.shape, why)
        else:
            found.pop(a.name, None)  # a sure read of the same value settles it
    return tuple(found.values())


def at_most_warning(found: Finding, doubt: str, check: str) -> Finding:
    """``found`` as a warning at most, opened by ``doubt`` (where and how the value was read)
    and ``check`` (what the reader should make sure of); an error says it would be one."""
    worse = "; as a setting it is an error" if found.severity == "error" else ""
    return warning(found.variable, f"{doubt} ({check}{worse}): {found.message}", found.fix,
                   source=found.source)


def capped(findings: list[Finding], doubtful: Iterable[Doubt]) -> list[Finding]:
    """``findings`` with every error on a doubtful variable lowered to a warning."""
    by_name = {d.name: d for d in doubtful}
    if not by_name:
        return findings
    return [at_most_warning(f, by_name[f.variable].reason(), "check what the process really "
                            "gets") if f.severity == "error" and f.variable in by_name else f
            for f in findings]
