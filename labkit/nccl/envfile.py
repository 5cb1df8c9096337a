"""Read pasted env blocks into a dict, and write a corrected ``export`` block back.

``parse_env_file(text)`` is ``labkit.nccl.paste.parse_env(text).env``: every shape people paste
(``export``, ``mpirun -x``, ``docker -e``, ``srun --export=``, YAML ``env:`` ...), the last
assignment winning, values unexpanded; ``parse_env`` also says where each came from and what it
could not read.
``render_exports(env, findings)`` applies each finding's ``Edit``: drops no-ops, renames deprecated
names, makes HCA/interface names exact, maps legacy levels to names, comments out debug-only lines;
every changed line says why, and the block reads back through ``parse_env_file`` to the same
values. ``tilde`` names the values whose opening ``~`` the shell expanded in the original
(``ParsedEnv.tilde``): they keep it unquoted, so it still expands.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence

from labkit.nccl.findings import Finding
from labkit.nccl.paste import parse_env


def parse_env_file(text: str) -> dict[str, str]:
    """The variables a pasted block sets (last assignment wins), values unexpanded."""
    return parse_env(text).env


def render_exports(env: Mapping[str, str], findings: Sequence[Finding],
                   tilde: Iterable[str] = ()) -> str:
    """A corrected ``export`` block for ``env``: each finding's edit applied, with the reason."""
    tilde = frozenset(tilde)
    lines = ["# Corrected by labkit nccl check: changed lines say why."]
    for name, value in env.items():
        edits = [f.edit for f in findings if f.variable == name and f.edit is not None]
        drops = [e for e in edits if e.action == "drop"]
        if drops:
            lines.append(f"# dropped {name}={_quote(value)}: {drops[0].reason}")
            continue
        new_name, new_value, reasons = name, value, []
        for edit in edits:
            if edit.action == "rename":
                new_name = edit.value
            elif edit.action == "set":
                new_value = edit.value
            if edit.action != "comment":
                reasons.append(edit.reason)
        line = f"export {new_name}={_quote(new_value, name in tilde and new_value == value)}"
        commented = [e.reason for e in edits if e.action == "comment"]
        if commented:
            line = "# " + line
            reasons = commented + reasons
        if new_value != value:
            reasons.append(f"was {value}")
        lines.append(line + (f"  # {'; '.join(reasons)}" if reasons else ""))
    return "\n".join(lines) + "\n"


def _quote(value: str, tilde: bool = False) -> str:
    prefix = re.match(r"~[A-Za-z0-9._+-]*(?:/|$)", value) if tilde else None
    if prefix:  # "~/" stays unquoted (its slash too) so that it expands; the rest as usual
        return prefix.group() + _quote(value[prefix.end():])
    if re.fullmatch(r"[\w.,:/=^@%+-]*", value):
        return value
    if ("$" in value or "`" in value) and _EXPANDING.fullmatch(value):
        return f'"{value}"'  # keeps $VAR, $(cmd) and `cmd` expanding, as in the original
    return shlex.quote(value)


# $NAME, ${NAME...}, $(cmd) and `cmd` without quotes or nesting inside: a lone "${" in double
# quotes is a bash syntax error
_EXPANDING = re.compile(r"(?:[\w.,:/=^@%+ -]|\$[A-Za-z_]\w*|\$\{[A-Za-z_][^{}\"`\\$]*\}"
                        r"|\$\([^()\"'`\\$]*\)|`[^\"'`\\$]*`)*")
