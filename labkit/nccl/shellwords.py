"""Shell words as bash reads them, nothing expanded: the first step in reading a pasted env line.

``split_words(text, start, end)`` splits one logical line into words (quotes removed as bash
removes them; ``$VAR``, ``${VAR}``, ``$(cmd)`` and backquotes kept as written, because the value a
user pasted is what the checker must see), operators (``;``, ``&&``, ``|``, ``(`` ...) and
redirections (``Redirect``: ``>> /etc/nccl.conf`` says where an ``echo`` goes), dropping
comments; ``labkit.nccl.commands`` reads what the commands set. ``substitutions(value)`` gives the
scripts of the ``$(...)`` and backquotes in a word, ``computed(value)`` whether a value holds
an expansion or a command substitution (the shell computes it: nothing to check as a literal),
and ``tilde_expands(raw)`` whether the shell replaces a ``~`` that opens a value. A pasted line
is often prose, not shell, so nothing here raises: an unterminated quote returns ``None`` and
the caller decides.
"""

from __future__ import annotations

import re
from typing import NamedTuple

RAW_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")  # bash: the name must be unquoted
_PLAIN = re.compile(r"[^\s'\"\\$`;&|()<>]+")
_DQ_PLAIN = re.compile(r"[^\"\\$`]+")
_VARIABLE = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])")
_OPERATOR = re.compile(r"&&|\|\||;;|[;&|()]")
_REDIRECT = re.compile(r"(?:&>>?|>>|>&|<&|>\||<<<|<<-?|<>|>|<)(\d+-?|-)?")
# $(cmd), not $((arithmetic)) nor $(NAME) alone (Kubernetes' reference to another variable)
_COMMAND = re.compile(r"\$\((?!\()(?![A-Z_][A-Z0-9_]*\))")
# bash's tilde-prefix: "~" and the characters up to the first unquoted "/" (or ":" in an
# assignment), none of them quoted: "~", "~user", "~+", "~-" (bash manual, Tilde Expansion).
_TILDE_PREFIX = re.compile(r"~[A-Za-z0-9._+-]*(?=[/:]|$)")
_LINK_TARGET = re.compile(r"\((?:[a-z][a-z0-9+.-]*:|www\.|#)[^\s()]*\)")  # (http://x), (#anchor)
_ANSI_C = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "e": "\x1b", "a": "\a"}


class Redirect(NamedTuple):
    """A redirection: ``op`` as written (``>``, ``>>``, ``<<``, ``<<-``, ``&>`` ...) and its target
    word with quotes removed (a file, or a here-document's delimiter)."""

    op: str
    target: str


class Word(NamedTuple):
    """One shell word: ``value`` after quote removal (expansions kept as written), ``raw`` as
    written (an assignment needs its name unquoted there). A tuple: a 1 MiB paste makes many."""

    value: str
    raw: str


Token = Word | str | Redirect


def split_words(text: str, start: int, end: int,
                open_at: list[int] | None = None) -> tuple[list[Token], int] | None:
    """Words, operators and redirections of the logical line at ``text[start:end]`` and where it
    stops (after its newline); ``None`` when a quote or ``$(`` is still open at ``end`` (then
    ``open_at``, if given, gets where the word with the open quote starts)."""
    tokens: list[Token] = []
    value: list[str] = []
    word_start = -1
    redirect = ""  # the operator whose target is the next word
    i = start

    def finish(at: int) -> None:
        nonlocal word_start, redirect
        if word_start >= 0:
            if redirect:
                tokens.append(Redirect(redirect, "".join(value)))
                redirect = ""
            else:
                tokens.append(Word("".join(value), text[word_start:at]))
        value.clear()
        word_start = -1

    while i < end:
        char = text[i]
        if char == "\n":
            finish(i)
            return tokens, i + 1
        if char in " \t\f\v":
            finish(i)
            i += 1
            continue
        if char == "#" and word_start < 0:
            newline = text.find("\n", i, end)
            i = end if newline < 0 else newline
            continue
        if char == "\\":
            if i + 1 < end and text[i + 1] == "\n":  # line continuation: removed, joins the lines
                i += 2
                continue
            if word_start < 0:
                word_start = i
            value.append(text[i + 1:i + 2])
            i += 2
            continue
        if char in "<>" and not (char == "<" and text.startswith("<(", i)):
            if word_start >= 0 and text[word_start:i].isdigit():  # 2>&1: the 2 is a descriptor
                value.clear()
                word_start = -1
            finish(i)
            match = _REDIRECT.match(text, i)
            assert match is not None
            redirect = match.group() if match.group(1) is None else ""  # 2>&1 has no target
            i = match.end()
            continue
        if char == "&" and text.startswith("&>", i):
            finish(i)
            redirect = "&>>" if text.startswith("&>>", i) else "&>"
            i += len(redirect)
            continue
        if char in ";&|()" and not (char == "(" and (_opens_array(text, word_start, i)
                                                      or _markdown_link(text, word_start, i))):
            finish(i)
            match = _OPERATOR.match(text, i)
            assert match is not None
            tokens.append(match.group())
            i = match.end()
            continue
        if word_start < 0:
            word_start = i
        step = _quoted_or_expansion(text, i, end, value)
        if step is None:
            return _unterminated(open_at, word_start)
        if step > i:
            i = step
            continue
        match = _PLAIN.match(text, i)
        if match is None:  # a lone ( of an array, or < of <(...)
            close = _closing(text, i + (text[i] == "<"), end)
            if close is None:
                return _unterminated(open_at, word_start)
            value.append(text[i:close])
            i = close
            continue
        value.append(match.group())
        i = match.end()
    finish(end)
    return tokens, end


def substitutions(value: str) -> list[str]:
    """The scripts of the ``$(...)`` and backquoted command substitutions in a word's value
    (``$((...))`` is arithmetic, not a command)."""
    found, i = [], 0
    while i < len(value):
        if value.startswith("$(", i) and not value.startswith("$((", i):
            close = _closing(value, i + 1, len(value))
            if close is None:
                break
            found.append(value[i + 2:close - 1])
            i = close
        elif value[i] == "`":
            close = _backquote_end(value, i, len(value))
            if close is None:
                break
            found.append(value[i + 1:close - 1])
            i = close
        else:
            i += 1
    return found


def computed(value: str) -> str:
    """What makes ``value`` computed by the shell rather than literal, in a few words ("a
    command substitution", "a shell expansion"), or "" when it is a literal. Values keep their
    expansions as written (``$VAR``, ``$(cmd)``, backquotes), so the text says which."""
    if _COMMAND.search(value) or ("`" in value and substitutions(value)):
        return "a command substitution"
    return "a shell expansion" if "$" in value else ""


def tilde_expands(raw: str) -> bool:
    """Whether a shell replaces the ``~`` that opens ``raw`` (a word as written, or the value
    part of an assignment word as written) with a home directory: an unquoted tilde-prefix
    followed by ``/``, ``:`` or nothing. ``"~/x"`` and ``\\~/x`` stay literal."""
    return _TILDE_PREFIX.match(raw) is not None


def _unterminated(open_at: list[int] | None, word_start: int) -> None:
    if open_at is not None:
        open_at.append(word_start)


def _opens_array(text: str, word_start: int, at: int) -> bool:
    """Whether the ``(`` at ``at`` opens an array value (``A=(1 2)``) rather than a subshell."""
    return word_start >= 0 and RAW_ASSIGNMENT.fullmatch(text[word_start:at]) is not None


def _markdown_link(text: str, word_start: int, at: int) -> bool:
    """Whether the ``(`` at ``at`` closes a Markdown link pasted into the word: a renderer turned
    a file name into ``[libx.so](http://libx.so)``; the word is read on to the link's end, as
    the author's text shows it (bash itself stops at the ``(`` with a syntax error)."""
    return word_start >= 0 and text[at - 1:at] == "]" and "[" in text[word_start:at] and \
        _LINK_TARGET.match(text, at) is not None


def _quoted_or_expansion(text: str, i: int, end: int, value: list[str]) -> int | None:
    """Read a quoted part or expansion at ``i`` into ``value``; the index after it, ``i`` when
    there is none there, ``None`` when it does not close before ``end``."""
    char = text[i]
    if char == "'":
        close = text.find("'", i + 1, end)
        if close < 0:
            return None
        value.append(text[i + 1:close])
        return close + 1
    if char == '"':
        return _double_quoted(text, i + 1, end, value)
    if char == "`":
        close = _backquote_end(text, i, end)
        if close is not None:
            value.append(text[i:close])
        return close
    if char != "$":
        return i
    if text.startswith("$'", i):
        return _ansi_c(text, i + 2, end, value)
    if text.startswith(("$(", "${"), i):
        close = _closing(text, i + 1, end)
        if close is not None:
            value.append(text[i:close])
        return close
    match = _VARIABLE.match(text, i)
    value.append(match.group() if match else "$")
    return match.end() if match else i + 1


def _double_quoted(text: str, i: int, end: int, value: list[str]) -> int | None:
    """Inside ``"..."``: backslash escapes only ``"\\$`` and newline; expansions kept."""
    while i < end:
        char = text[i]
        if char == '"':
            return i + 1
        if char == "\\" and i + 1 < end:
            following = text[i + 1]
            if following != "\n":
                value.append(following if following in '"\\$`' else "\\" + following)
            i += 2
        elif char in "$`":
            step = _quoted_or_expansion(text, i, end, value)
            if step is None:
                return None
            i = step
        else:
            match = _DQ_PLAIN.match(text, i)
            piece = match.group() if match else char
            value.append(piece)
            i += len(piece)
    return None


def _ansi_c(text: str, i: int, end: int, value: list[str]) -> int | None:
    """Inside ``$'...'``: the common backslash escapes decoded, others kept."""
    while i < end:
        char = text[i]
        if char == "'":
            return i + 1
        if char == "\\" and i + 1 < end:
            value.append(_ANSI_C.get(text[i + 1], "\\" + text[i + 1]))
            i += 2
        else:
            value.append(char)
            i += 1
    return None


def _backquote_end(text: str, i: int, end: int) -> int | None:
    """The index after the backquote that closes the one at ``i``."""
    j = i + 1
    while j < end:
        if text[j] == "\\":
            j += 2
        elif text[j] == "`":
            return j + 1
        else:
            j += 1
    return None


def _closing(text: str, i: int, end: int) -> int | None:
    """The index after the bracket that closes the ``(`` or ``{`` at ``i``, skipping quotes."""
    opening = text[i]
    closing = ")" if opening == "(" else "}"
    depth = 0
    while i < end:
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char in "'\"":
            close = text.find(char, i + 1, end)
            while char == '"' and close > 0 and text[close - 1] == "\\":
                close = text.find(char, close + 1, end)
            if close < 0:
                return None
            i = close + 1
            continue
        if char == opening:
            depth += 1
        elif char == closing:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


_PS2 = re.compile(r"[ \t]*>[ \t]+")  # the secondary prompt before a continued line


def drop_continuation_prompts(text: str) -> str:
    """Blank the shell's secondary prompt (``> ``) at the start of a line that a ``\\`` line
    continues, as an interactive shell shows a command typed over several lines; same length,
    so line numbers and offsets stay."""
    if "\\\n" not in text:
        return text
    lines = text.split("\n")
    for n in range(1, len(lines)):
        before = lines[n - 1]
        if (len(before) - len(before.rstrip("\\"))) % 2 and (m := _PS2.match(lines[n])):
            lines[n] = " " * m.end() + lines[n][m.end():]
    return "\n".join(lines)
