"""Texts inside a paste that ``labkit.nccl.paste``'s reader reads as texts of their own.

- A Markdown code span that opens a line and closes at the end of a later one (`` `export A=1
  <newline> export B=2` ``): its inside, line by line.
- A here-document's body (``cat <<EOF > job.yaml``, ``ssh host bash <<'EOF'``): what the command
  gets, a YAML file or a script, so its blocks cannot run on into the lines after the delimiter.
  ``<<-`` strips the body's leading tabs; with an unquoted delimiter the shell removes the
  backslash before ``$``, a backquote and a backslash (bash manual, "Here Documents").
- A here-document written into NCCL's config file, read as NCCL reads it
  (``labkit.nccl.ncclconf``).

``Inner`` is a mixin of the reader: it needs the reader's ``text``, ``lines``, ``starts``,
``bash``, what it collects (``assignments``, ``unparsed``, ``notes``, ``logs``), its ``_add`` and
``run``, and makes a reader of the same class for the inner text.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import replace
from typing import Any

from labkit.nccl import ncclconf
from labkit.nccl.commands import Found
from labkit.nccl.shellwords import Token

MAX_SPAN = 20  # physical lines one quoted value (or one code span) may span
_QUOTED_HERE = re.compile(r"""<<-?\s*(?:["']|\\)""")  # <<'EOF': the body is taken as written
_HERE_ESCAPE = re.compile(r"\\([$`\\])")  # what an unquoted here-document's backslash quotes


class Inner:
    """Code spans and here-documents, for ``labkit.nccl.paste``'s reader."""

    text: str
    lines: list[str]
    starts: list[int]
    bash: bool
    assignments: list[Any]
    unparsed: list[tuple[int, str]]
    notes: list[tuple[int, str]]
    logs: dict[tuple[int, int], str | None]

    def _code_span(self, i: int) -> int | None:
        """A Markdown code span opening line ``i`` and closing at the end of a later one: its
        inside read as lines of their own; the line after it, or None when the line opens no
        such span."""
        opening = self.starts[i] + self.lines[i].index("`")
        closing = self.text.find("`", opening + 1)
        last = bisect_right(self.starts, closing) - 1 if closing > 0 else -1
        if last <= i or last - i > MAX_SPAN or self.text[closing + 1:self.starts[last]
                                                           + len(self.lines[last])].strip():
            return None
        self._read_inside(self.text[opening + 1:closing], i, self.bash)
        return last + 1

    def _here_document(self, tokens: list[Token], raw: str, after: int) -> int:
        """The here-document a command in ``tokens`` (written as ``raw``) reads, if any, from
        line index ``after`` on; the line to read next."""
        here = ncclconf.heredoc(tokens)
        if here is None:
            return after
        if here.conf:
            return self._conf_body(after, here.delimiter, here.file, here.tabs)
        last = after
        while last < len(self.lines) and (self.lines[last].lstrip("\t") if here.tabs
                                          else self.lines[last]) != here.delimiter:
            last += 1
        body = "\n".join(line.lstrip("\t") if here.tabs else line
                         for line in self.lines[after:last])
        quoted = _QUOTED_HERE.search(raw) is not None
        self._read_inside(body if quoted else _HERE_ESCAPE.sub(r"\1", body), after,
                          None if body.startswith("#!") else self.bash)
        return last + 1

    def _read_inside(self, text: str, offset: int, bash: bool | None) -> None:
        """Read ``text``, which starts on line index ``offset``, with a reader of its own
        (``bash`` None: as its own ``#!`` line says), and keep what it found."""
        inside: Any = type(self)(text)  # type: ignore[call-arg]
        if bash is not None:
            inside.bash = bash
        inside.run()
        self.assignments += [replace(a, line=a.line + offset) for a in inside.assignments]
        self.unparsed += [(n + offset, line) for n, line in inside.unparsed]
        self.notes += [(n + offset, note) for n, note in inside.notes]
        self.logs.update({(n + offset, indent): key for (n, indent), key in inside.logs.items()})

    def _conf_body(self, i: int, delimiter: str, file: str, tabs: bool) -> int:
        """A here-document's body written to NCCL's config file; the line after it."""
        body, after = ncclconf.heredoc_body(self.lines, i, delimiter, file, tabs)
        for number, line, settings, notes in body:
            self._add(number, line, [Found(s.name, s.value, ncclconf.SHAPE, s.file)
                                     for s in settings])
            self.notes += [(number, note) for note in notes]
        return after
