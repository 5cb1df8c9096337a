"""Unicode spaces in a paste, read as the plain spaces their author typed.

Wikis, web pages and chat tools put a NO-BREAK SPACE (U+00A0, HTML ``&nbsp;``) or another
Unicode space where the author typed a space: between ``export`` and a name in inline code, in
CJK text (U+3000 IDEOGRAPHIC SPACE), before a unit (U+202F NARROW NO-BREAK SPACE); some insert a
ZERO WIDTH SPACE (U+200B) so that a long name may wrap. A shell splits words only at spaces, tabs
and newlines, so ``export\\u00a0NCCL_X=1`` run as it is is one word, a command that does not exist;
what the author meant, and what a reader of the page sees, is ``export NCCL_X=1``.

``plain_spaces(text)`` reads the paste that way, and says where it did (``spaced_notes``):

- outside quotes, a visible Unicode space (U+00A0, U+1680, U+2000-U+200A, U+202F, U+205F,
  U+3000) becomes a plain space, and a zero-width one (U+200B, U+2060, U+FEFF inside the text)
  is dropped, as it shows no space at all (``NCCL_\\u200bDEBUG`` reads ``NCCL_DEBUG``);
- inside a quoted string (``'...'`` or ``"..."``) opened at the start of a word or of a word's
  next quoted part (after a blank, ``=``, ``(``, ``[``, ``:``, ``,``, ``{``, a backquote, a quote
  or ``$``: ``'a'"'"'b'``, ``$'...'``) and closed on the same line, or opened
  right after ``=`` or a quote (an assignment's value, a word's next quoted part: these may go on
  over lines), nothing changes: there
  the character is part of a value as a shell, YAML, JSON or Python passes it on, so the checker
  sees the value the process would get. A quote inside a word (an apostrophe: "don't") opens
  nothing, and any other quote that does not close on its line is taken as prose;
- line breaks are never touched (U+2028/U+2029 included), so line numbers stay as they are.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left

_VISIBLE = "\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000"
_ZERO_WIDTH = "\u200b\u2060\ufeff"
_ANY = re.compile(f"[{_VISIBLE}{_ZERO_WIDTH}]")
_VISIBLE_RUN = re.compile(f"[{_VISIBLE}]")
_ZERO_RUN = re.compile(f"[{_ZERO_WIDTH}]")
# A quoted string: one opened at the start of a word and closed on the same line, or an
# assignment's value or a word's next quoted part (after "=" or a quote), which may go on over
# lines (A='one<newline>two', A='it'"'"'s<newline>two').
_QUOTED = re.compile(r"""(?<=[='"])(?:'[^']{0,4000}'|"(?:[^"\\]|\\.){0,4000}")"""
                     r"""|(?<![^\s=(\[:,`{'"$])(?:'[^'\n]*'|"(?:[^"\\\n]|\\.)*")""")


def plain_spaces(text: str) -> tuple[str, dict[int, str]]:
    """``text`` with Unicode spaces outside quotes read as plain ones (see the module docstring),
    and, for each line changed (numbered from 1), what was done there, the characters named."""
    if not _ANY.search(text):
        return text, {}
    breaks = [m.start() for m in re.finditer("\n", text)]
    pieces: list[str] = []
    seen: dict[int, set[str]] = {}
    at = 0
    for quoted in [*_QUOTED.finditer(text), None]:
        start = quoted.start() if quoted else len(text)
        for found in _ANY.finditer(text, at, start):
            line = bisect_left(breaks, found.start()) + 1
            seen.setdefault(line, set()).add(found.group())
        pieces.append(_ZERO_RUN.sub("", _VISIBLE_RUN.sub(" ", text[at:start])))
        if quoted:
            pieces.append(quoted.group())
            at = quoted.end()
    changed = {}
    for line, chars in seen.items():
        visible = [_name(c) for c in sorted(chars) if c not in _ZERO_WIDTH]
        zero = [_name(c) for c in sorted(chars) if c in _ZERO_WIDTH]
        changed[line] = "; ".join(([f"read {', '.join(visible)} as a plain space"] if visible
                                   else []) + ([f"dropped {', '.join(zero)}"] if zero else []))
    return "".join(pieces), changed


def _name(char: str) -> str:
    return f"U+{ord(char):04X} ({unicodedata.name(char, 'ZERO WIDTH NO-BREAK SPACE')})"


def spaced_notes(changed: dict[int, str], lines_read: set[int]) -> list[tuple[int, str]]:
    """A note for each changed line that set something: what was read as a space there."""
    return [(n, f"{done}, as the line's author meant it: a shell splits words only at spaces, "
                "tabs and newlines, so retype those characters before running the line")
            for n, done in sorted(changed.items()) if n in lines_read]
