"""Read ``export K=V`` blocks (as pasted from a guide) and write a corrected block back.

``parse_env_file`` reads what bash would assign, without expanding anything: ``export K=V``,
``K=V``, quotes, inline ``# comments``; it skips blank lines, comments, code-fence and language-tag
lines (a lone ``bash``) and anything that is not an assignment.
``render_exports(env, findings)`` applies each finding's ``Edit``: drops no-ops, renames deprecated
names, makes HCA/interface names exact, maps legacy levels to names, comments out debug-only lines;
every changed line says why.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from labkit.nccl.findings import Finding

_ASSIGNMENT = re.compile(r"(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)")
_LANGUAGE_TAGS = {"bash", "sh", "shell", "zsh", "console", "text"}


def parse_env_file(text: str) -> dict[str, str]:
    """The variables a shell snippet assigns (last assignment wins), values unexpanded."""
    env: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "```")) or line.lower() in _LANGUAGE_TAGS:
            continue
        match = _ASSIGNMENT.fullmatch(line)
        if match:
            env[match.group(1)] = _shell_word(match.group(2))
    return env


def _shell_word(text: str) -> str:
    """The first shell word of ``text``: quotes removed, stops at unquoted whitespace (and so
    before an inline ``# comment``), backslash escapes honored."""
    word, quote, index = [], "", 0
    while index < len(text):
        char = text[index]
        if quote:
            if char == quote:
                quote = ""
            elif char == "\\" and quote == '"' and index + 1 < len(text) \
                    and text[index + 1] in '"\\$`':
                index += 1
                word.append(text[index])
            else:
                word.append(char)
        elif char in "'\"":
            quote = char
        elif char == "\\" and index + 1 < len(text):
            index += 1
            word.append(text[index])
        elif char.isspace() or char == ";":
            break
        else:
            word.append(char)
        index += 1
    return "".join(word)


def render_exports(env: Mapping[str, str], findings: Sequence[Finding]) -> str:
    """A corrected ``export`` block for ``env``: each finding's edit applied, with the reason."""
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
        line = f"export {new_name}={_quote(new_value)}"
        commented = [e.reason for e in edits if e.action == "comment"]
        if commented:
            line = "# " + line
            reasons = commented + reasons
        if new_value != value:
            reasons.append(f"was {value}")
        lines.append(line + (f"  # {'; '.join(reasons)}" if reasons else ""))
    return "\n".join(lines) + "\n"


def _quote(value: str) -> str:
    if re.fullmatch(r"[\w.,:/=^@%+-]*", value):
        return value
    if "$" in value and re.fullmatch(r"[\w.,:/=^@%+${} -]*", value):
        return f'"{value}"'  # keeps $VAR expanding, as it did in the original
    return shlex.quote(value)
