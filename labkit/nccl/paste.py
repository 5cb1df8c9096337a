"""Every shape in which people paste env settings, read into one result with line numbers.

    parsed = parse_env(text)          # labkit.nccl.envsource.read_env_source("job.sh") for a file
    parsed.env                        # {"NCCL_DEBUG": "INFO", ...}: last assignment wins
    parsed.assignments[0]             # Assignment(name, value, line, shape, raw)
    parsed.unparsed                   # [(line, text)]: meant to set something, not readable

Shapes: ``export A=1 B=2; export C=3``, ``declare -x``, ``K=V`` (``.env``, ``printenv``), prefix
``A=1 cmd``, ``env``/``sudo A=1 cmd``, ``unset``, ``mpirun -x A=1 -x B``, ``-genv``,
``docker run -e``/``--env``, ``kubectl --env``, ``apptainer --env``, ``srun``/``sbatch
--export=`` (also as ``#SBATCH``), ``bash -c '...'``, Dockerfile ``ENV``, ``%env``, csh
``setenv``, other shells' and tools' set commands (fish ``set -gx``, cmd.exe ``set``, ``setx``,
``systemctl set-environment``, ``env -S`` ...: ``labkit.nccl.dialects``), systemd ``Environment=``, YAML ``env:``/``environment:`` (``labkit.nccl.yamlenv``),
``os.environ[...] = ...``, JSON ``"NCCL_X": "1"`` pairs, Python dict / JSON object literals
(``labkit.nccl.pydict``), typed fields of a class whose fields are all variable names
(``NCCL_DEBUG: str = "INFO"``: ``labkit.nccl.pyfields``; such a line is never read as YAML),
shell statements in quoted strings (``cmd = "export A=1;export B=2"``) and in ``$(...)``, and
lines written to NCCL's config files (``echo K=V >> /etc/nccl.conf``, ``printf``, ``tee``,
here-documents: ``labkit.nccl.ncclconf``, merged as NCCL merges them, see
``labkit.nccl.parsed``; any other here-document's body, a YAML file or a script, is read as a
text of its own, as the command gets it: ``labkit.nccl.inner``), PowerShell (``$env:A =
"1"``, ``SetEnvironmentVariable``, ``Set-Item Env:A``: ``labkit.nccl.powershell``), NCCL's own
log lines that echo a setting (``A set by environment to 15.``: ``labkit.nccl.nccllog``), and
Markdown / RST tables of variables and values (``labkit.nccl.mdtable``). Around them: a UTF-8 BOM, CRLF, ``\\`` continuations, Markdown fences
and bullets, ``$ ``/``user@host:~#`` prompts, ``set -x`` (``+``) traces, comments, NO-BREAK and
other Unicode spaces outside quotes (``labkit.nccl.spaces``). Values stay unexpanded (``$VAR``
kept) with quotes removed, as bash removes them. A name passed on without a value (``mpirun -x
NAME``, ``docker -e NAME``, ``valueFrom``) is "named, value not given": listed in ``named``, not
in ``env``.

Not settings: log output that prints them as ``NAME: value`` (``labkit.nccl.logoutput``).
Besides the variables, ``ParsedEnv.job`` says what the paste shows of the job: a benchmark's
collectives, the node count, the values whose ``~`` the shell expands (``labkit.nccl.parsed``),
the networks its NCCL log shows in use, what a loose scan finds outside these shapes (``loose``:
``labkit.nccl.loose``), the defaults its Python code bakes in (``baked``: ``labkit.nccl.baked``)
and the values an unsure read took with another language's syntax in them (``doubtful``:
``labkit.nccl.confidence``).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import replace

from labkit.nccl import dialects, mdtable, nccllog, powershell, pydict, pyfields
from labkit.nccl.baked import baked_defaults
from labkit.nccl.commands import ASSIGNMENT, BASH_TILDE, SHELL_TILDE, Found, read_commands
from labkit.nccl.commands import WATCHED as _WATCHED
from labkit.nccl.confidence import doubts
from labkit.nccl.inner import MAX_SPAN, Inner
from labkit.nccl.logoutput import LOG_NOTE, log_run
from labkit.nccl.loose import loose_pairs
from labkit.nccl.parsed import Assignment, ParsedEnv, benchmarked_collectives, merge, node_count
from labkit.nccl.shellwords import (
    RAW_ASSIGNMENT,
    Word,
    drop_continuation_prompts,
    split_words,
    tilde_expands,
)
from labkit.nccl.spaces import plain_spaces, spaced_notes
from labkit.nccl.yamlenv import EnvBlock, is_null, yaml_scalar

__all__ = ["Assignment", "ParsedEnv", "parse_env"]

_LANGUAGE_TAGS = {"bash", "sh", "shell", "zsh", "console", "text", "yaml", "yml", "env",
                  "dotenv", "ini", "dockerfile", "json", "python", "powershell", "pwsh", "ps1"}
_PROMPT = re.compile(r"""\s*(?:\+{1,9}\s+                          # set -x trace
    | (?:\([\w.-]+\)\s*)?(?:\[[^\]]*\]|[\w.-]+@[\w.-]+(?::\S*?)?|[\w.-]+:[~/]\S*?)?\s*[$%]\s+
                                                              # $, user@host:~$, host:~/dir$
    | (?:\[[^\]]*\]|[\w.-]+@[\w.-]+(?::\S*?)?)\s*\#\s+        # root@host:~#, [root@host ~]#
    | (?:>>>|\.\.\.|>|[-*+])\s+ | In\s\[\d+\]:\s*)            # python, quote, bullet, IPython
    """, re.VERBOSE)
# "# mpirun -x ..." is a command behind root's prompt when the rest of a paste sets nothing; a
# commented-out "# export A=1" stays a comment.
_ROOT_PROMPT = re.compile(r"^[ \t]*#[ \t]+((?:sudo[ \t]+)?(?:mpirun|mpiexec|torchrun|srun|docker|"
                          r"python3?|deepspeed|accelerate|[A-Z][A-Z0-9_]*=\S*[ \t]+\S)\b)",
                          re.MULTILINE)
_SYSTEMD_SECTION = re.compile(r"^\[(?:Unit|Service|Install)\]\s*$", re.MULTILINE)
_SYSTEMD_KEY = re.compile(r"[A-Z][A-Za-z]*=")
_MENTION = re.compile(rf"(?<![\w${{%])(?:{_WATCHED})(?!\w)"
                      r"|(?:^|(?<=[\s;&|(]))[\"']?([A-Z_][A-Z0-9_]*)(?==)")
_READ_IN_CODE = re.compile(r"""(?:environ\.get|getenv|environ)\s*[\[(]\s*["'][\w]+["']"""
                           r"""|["']\w+["']\s+(?:not\s+)?in\s+(?:os\.)?environ\b"""
                           r"""|\bset\s+(?:-[a-zA-Z]*q[a-zA-Z]*|--query)\s+\w+""")  # fish: asks
_YAML_TOP = re.compile(rf"\s*([\"']?)({_WATCHED})\1\s*:\s+(.*)")
_SIMPLE = re.compile(r"(export\s+)?([A-Za-z_][A-Za-z0-9_]*)=([^\s'\"\\$`;&|()<>]*)")
_NAMING = re.compile(r"(?<![\w-])(?:export|unset|declare|typeset|readonly|local|ENV|setenv|%env"
                     r"|-x|-e|-u|--env|--export|-genv|-env|-genvlist|set(?=[ \t]+(?:--?[A-Za-z]|env"
                     r"[ \t]))|setx|set-env|unsetenv|unset-env|unset-environment)(?!\S)")  # fish
_STRING_LINE = re.compile(r"""\s*[fbrFBR]?(["'])((?:(?!\1).)*)\1\s*[,+)]?\s*""")  # "A=1 "
# "I worked ...", "2. If I set ...", "set X=0 and it works", a reply to "@user ...": a sentence,
# not a command line
_SENTENCE = re.compile(r"\s*(?:\d{1,2}[.)]\s+)?(?:[A-Z][a-z']*[,:]?|set|try|use|with|then|and)\s"
                       r"|\s*@[A-Za-z0-9][\w-]*[,:]?\s"
                       r"|\s*\[\w[\w ./-]*\]\s")  # or a titled "[Core] NCCL_X=1 leads to ..."
_PROSE_PAIR = re.compile(rf"(?<![\w$%-])({_WATCHED})=([^\s'\"`;()<>]+?)"
                         rf"(?=[`'\"]*[.,;:!?)]*(?:\s|$)|,(?:{_WATCHED})=)")  # `A=x`., A=x,B=y
_WATCHED_KEY = re.compile(_WATCHED)
_LEAD_IN = re.compile(rf"[^=`'\"]*?:\s+(?=(?:{_WATCHED})=)")  # "the command is : NCCL_X=1 ./run"
_QUOTED_KEY = re.compile(rf"""["'](?:{_WATCHED})["']\s*:""")
def parse_env(text: str) -> ParsedEnv:
    """Read every variable a pasted block sets, whatever its shape (see the module docstring)."""
    text, respaced = plain_spaces(drop_continuation_prompts(
        text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")))
    reader = _Reader(text)
    reader.run()
    if not reader.assignments and not text.startswith("#!") and _ROOT_PROMPT.search(text):
        unprompted = _Reader(_ROOT_PROMPT.sub(r"\1", text))
        unprompted.run()
        if unprompted.assignments:
            first = unprompted.assignments[0].line
            unprompted.notes.insert(0, (first, "read '# <command>' as a root shell prompt, not a "
                                        "comment: nothing else in the text sets a variable"))
            reader = unprompted
    reader.assignments, logged = nccllog.log_settings(reader.assignments)
    reader.notes += logged + spaced_notes(respaced, {a.line for a in reader.assignments})
    parsed = reader.result()
    skip = {n + 1 for (n, _), key in reader.logs.items() if key is not None}  # log output
    skip |= {a.line for a in reader.assignments if a.shape == pyfields.SHAPE}  # read as Python
    return replace(parsed, runs=benchmarked_collectives(text), nodes=node_count(text, parsed.env),
                   nets=nccllog.shown_nets(text), baked=baked_defaults(text), loose=loose_pairs(
                       text, {a.name for a in parsed.assignments if a.value is not None
                              or a.shape == "unset"}, skip),
                   doubtful=doubts(parsed.assignments, parsed.env))


class _Reader(Inner):
    """One pass over the lines: YAML blocks, other one-line shapes, then shell."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.split("\n")
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line) + 1)
        self.systemd = _SYSTEMD_SECTION.search(text) is not None
        self.assignments: list[Assignment] = []
        self.unparsed: list[tuple[int, str]] = []
        self.notes: list[tuple[int, str]] = []
        self.literal_end = 0  # lines before it belong to a dict literal already read
        self.watched_keys: list[int] | None = None  # offsets of quoted watched keys
        # bash expands ~ after NAME= in arguments (mpirun -x A=~/x); sh (POSIX mode) and zsh
        # do not. A paste without a #! line is taken as bash, the shell people paste from.
        first = self.lines[0].strip() if self.lines else ""
        self.bash = not first.startswith("#!") or "bash" in first
        self.logs: dict[tuple[int, int], str | None] = {}  # (line, indent) -> its run's log key
        self.fields = pyfields.Fields(self.lines)  # Python annotated assignments (class fields)
        self.shell = dialects.dialect(text)  # which shell's "set NAME=value" this is, if told

    def run(self) -> None:
        block: EnvBlock | None = None
        tables = mdtable.env_tables(self.lines) if "|" in self.text else {}
        i = 0
        while i < len(self.lines):
            line = self.lines[i]
            if block is None and i in tables:  # a table of variables and values (mdtable)
                for number, found_one, raw in tables[i][0]:
                    self._add(number, raw, [found_one])
                i = tables[i][1]
                continue
            if block is not None:
                consumed = block.feed(line, i + 1)
                self._drain(block)
                if consumed:
                    i += 1
                    continue
                block = None
            block = EnvBlock.start(line, i + 1) if ":" in line and (
                "nv" in line or "variables" in line or "name" in line) else None
            if block is not None:
                self._drain(block)
                i += 1
                continue
            i = self._line(i)
        if block is not None:
            block.close()
            self._drain(block)

    def _drain(self, block: EnvBlock) -> None:
        for number, found, raw in block.found:
            self._add(number, raw, [found])
        self.unparsed += [(n, self.lines[n - 1].strip()) for n in block.unparsed]
        block.found.clear()
        block.unparsed.clear()

    def _add(self, number: int, raw: str, found: list[Found]) -> None:
        self.assignments += [Assignment(f.name, f.value, number, f.shape, raw, f.file,
                                        f.tilde == SHELL_TILDE or (f.tilde == BASH_TILDE
                                                                   and self.bash))
                             for f in found]

    def _line(self, i: int) -> int:
        """Read the line at ``i`` (and the lines it continues onto); the next line to read."""
        line = self.lines[i]
        stripped = line.strip()
        number = i + 1
        if not stripped or stripped.startswith(("```", "~~~")) or \
                stripped.lower() in _LANGUAGE_TAGS:
            return i + 1
        if stripped.startswith("`") and not stripped.startswith("``"):
            after = self._code_span(i)
            if after is not None:
                return after
        if stripped.startswith("#"):
            if stripped.startswith("#SBATCH"):  # sbatch reads these options, not a shell
                self._shell_text(number, stripped, "sbatch " + stripped[7:], shell=False)
            elif number == 1 and stripped.startswith("#!") and " -S" in stripped:
                self._shell_text(number, stripped, stripped[2:], shell=False)  # env -S A=1 cmd
            return i + 1
        if stripped.startswith("Environment="):
            self._shell_text(number, stripped, stripped[12:], "systemd Environment=")
            return i + 1
        if self.systemd and _SYSTEMD_KEY.match(stripped):
            return i + 1  # ExecStart= and the like: unit settings, not variables
        literal = pydict.read_dict(self.text, self.starts[i], number, _WATCHED_KEY) \
            if "{" in line and i >= self.literal_end and self._may_hold_env(i) else None
        if literal is not None:  # a literal holding no settings is not read again line by line
            self.literal_end = bisect_right(self.starts, literal[1] - 1)
            for n, found_one, raw in literal[0]:
                self._add(n, raw, [found_one])
            if literal[0]:
                return self.literal_end
        keyword = pydict.read_keyword(line, self.lines[i - 1]) \
            if i and line[:1].isspace() and stripped.endswith((",", ")", ":")) else None
        if keyword is not None:  # RANK=str(rank), in a call: Python, not a shell assignment
            self._add(number, stripped, [keyword])
            return i + 1
        simple = _SIMPLE.fullmatch(stripped)
        if simple:  # the common case, read without the tokenizer: 1 MiB of these stays fast
            shape = "export" if simple.group(1) else "K=V"
            tilde = SHELL_TILDE if tilde_expands(simple.group(3)) else ""
            self._add(number, stripped, [Found(simple.group(2), simple.group(3), shape,
                                               tilde=tilde)])
            return i + 1
        field = self.fields.read(i) if ":" in line else None
        if field is not None:  # NCCL_X: str = "1": Python, not YAML (labkit.nccl.pyfields)
            if field[0] is not None:
                self._add(number, stripped, [field[0]])
            return i + 1
        if self._own_shape(number, stripped):
            return i + 1
        if "os.environ[" in line and "]" not in line:  # os.environ[ / "KEY" / ] = "v"
            joined = self._joined(i, "]")
            if joined is not None and (found := pydict.code_pairs(joined[0])):
                self._add(number, joined[0], found)
                return joined[1]
        string = _STRING_LINE.fullmatch(line) if "=" in line else None
        if string and _MENTION.search(string.group(2)):  # "NCCL_X=1 " in Python strings
            self._shell_text(number, stripped, string.group(2))
            return i + 1
        found = pydict.code_pairs(stripped) if "os." in line or '":' in line or "':" in line \
            or ("env" in line and "[" in line) else []
        top = _YAML_TOP.fullmatch(line) if ":" in line and "_" in line else None
        if top and not found and self._log_output(i):
            return i + 1
        if top and not found:  # YAML null (null, ~, nothing) sets nothing: named, not given
            value = None if is_null(top.group(3)) else yaml_scalar(top.group(3))
            found = [Found(top.group(2), value, "yaml env")] \
                if value is not None or is_null(top.group(3)) else []
        if found:
            self._add(number, stripped, found)
            return i + 1
        if "=" not in line and not line.endswith("\\") and not _NAMING.search(line) \
                and "<<" not in line:
            self._check_read(i, stripped, [])  # prose, or commands that set nothing
            return i + 1
        return self._shell(i)

    def _own_shape(self, number: int, line: str) -> bool:
        """Whether ``line`` is PowerShell that sets variables (``labkit.nccl.powershell``) or an
        NCCL log line that echoes one (``labkit.nccl.nccllog``)."""
        other = dialects.read_line(line, self.shell)  # cmd.exe/csh set, nushell $env.NAME
        if other is not None:
            self._add(number, line, [Found(n, v, shape) for n, v, shape in other[0]])
            self.notes += [(number, other[1])] if other[1] else []
            return True
        read = powershell.read_line(line)
        if read is not None:
            self._add(number, line, read[0])
            self.notes += [(number, note) for note in read[1]]
            return True
        echoed = nccllog.read_line(line)
        if echoed is not None:
            self._add(number, line, echoed)
        return echoed is not None

    def _log_output(self, i: int) -> bool:
        """Whether line ``i``, a bare ``NAME: value``, is log output (``labkit.nccl.logoutput``);
        its run gets one note, on its first line, and each line of it is looked at once."""
        indent = len(self.lines[i]) - len(self.lines[i].lstrip())
        if (i, indent) not in self.logs:
            first, last, key = log_run(self.lines, i, indent)
            for n in range(first, last + 1):
                self.logs[(n, indent)] = key
            if key is not None:
                self.notes.append((first + 1, LOG_NOTE.format(key=key)))
        return self.logs[(i, indent)] is not None

    def _joined(self, i: int, closing: str, most: int = 4) -> tuple[str, int] | None:
        """Line ``i`` and the next few up to the one holding ``closing``, joined without their
        breaks and indents; with the line after them. None when ``closing`` never comes."""
        for last in range(i + 1, min(len(self.lines), i + most)):
            if closing in self.lines[last]:
                return "".join(line.strip() for line in self.lines[i:last + 1]), last + 1
        return None

    def _may_hold_env(self, i: int) -> bool:
        """Whether a literal opening on line ``i`` can be an environment: ``env`` before its
        brace, or a quoted watched key ("NCCL_X":) somewhere after it (found once per text)."""
        if "env" in self.lines[i].lower():
            return True
        if self.watched_keys is None:
            self.watched_keys = [m.start() for m in _QUOTED_KEY.finditer(self.text)]
        at = bisect_right(self.watched_keys, self.starts[i] - 1)
        return at < len(self.watched_keys)

    def _shell_text(self, number: int, raw: str, text: str, shape: str = "",
                    shell: bool = True) -> None:
        """A one-line shell text that is not the file's own line (``#SBATCH``, systemd);
        ``shell``: whether a shell runs it (sbatch reads ``#SBATCH`` lines itself: no ``~``
        expansion)."""
        result = split_words(text, 0, len(text))
        if result is None:
            self.unparsed.append((number, raw))
            return
        if shape:  # systemd: every word is an assignment, quotes as in shell
            found = [Found(m.group(1), m.group(2), shape) for w in result[0]
                     if isinstance(w, Word) and (m := ASSIGNMENT.fullmatch(w.value))]
            notes: list[str] = []
        else:
            found, notes = read_commands(result[0])
        if not shell:
            found = [f._replace(tilde="") for f in found]
        self._add(number, raw, found)
        self.notes += [(number, note) for note in notes]

    def _shell(self, i: int) -> int:
        line = self.lines[i]
        prompt = _PROMPT.match(line)
        start = self.starts[i] + (prompt.end() if prompt else 0)
        last = i
        while last + 1 < len(self.lines) and last - i < 50 and \
                (len(self.lines[last]) - len(self.lines[last].rstrip("\\"))) % 2 and \
                not self.lines[last + 1].strip().startswith(("```", "~~~")):
            last += 1
        end = self.starts[last] + len(self.lines[last].rstrip())
        if self.text[end - 1:end] == "\\" and (len(self.lines[last].rstrip()) - len(
                self.lines[last].rstrip().rstrip("\\"))) % 2:  # continued onto a fence or nothing
            end -= 1
        content = self.text[start:end].strip()
        if len(content) > 2 and content[0] == content[-1] == "`" and "`" not in content[1:-1]:
            start, end = self.text.index("`", start) + 1, self.text.rindex("`", start, end)
        open_at: list[int] = []
        result = split_words(self.text, start, end, open_at)
        if result is None and open_at and RAW_ASSIGNMENT.match(self.text, open_at[0]):
            # the open quote is in a value (export A='two\nlines'): let it span lines
            far = min(len(self.lines) - 1, last + MAX_SPAN)
            result = split_words(self.text, start, self.starts[far] + len(self.lines[far]))
        if result is None:
            self._check_read(i, self.lines[i], [])
            return i + 1
        tokens, stop = result
        found, notes = read_commands(tokens)
        raw = self.text[self.starts[i]:stop].strip()
        self._add(i + 1, raw, found)
        self.notes += [(i + 1, note) for note in notes]
        self._check_read(i, raw, found)
        after = max(i + 1, bisect_right(self.starts, stop - 1))
        return self._here_document(tokens, raw, after)

    def _check_read(self, i: int, span: str, found: list[Found]) -> None:
        """Report the line as unparsed when it mentions a setting that nothing read (a mention
        inside a value that was read, as in ``A="$(grep NCCL_X f)"``, does not count)."""
        read = {f.name for f in found}
        if "env" in span or "set" in span:
            span = _READ_IN_CODE.sub("", span)
        missing = {m.group(1) or m.group() for m in _MENTION.finditer(span)} - read
        prose = [Found(m.group(1), m.group(2), "in prose") for m in _PROSE_PAIR.finditer(span)
                 if m.group(1) in missing] if _SENTENCE.match(span) else []
        if prose:  # "worked around it with NCCL_LL_THRESHOLD=0." read as what it sets
            self._add(i + 1, span.strip(), prose)
            missing -= {f.name for f in prose}
        lead_in = _LEAD_IN.match(span) if missing and not prose else None
        if lead_in:  # "the command is : NCCL_DEBUG=INFO ./all_reduce_perf": a command after it
            before = len(self.assignments)
            self._shell_text(i + 1, span.strip(), span[lead_in.end():])
            missing -= {a.name for a in self.assignments[before:]}
        if any(not any(name in (f.value or "") for f in found) for name in missing):
            self.unparsed.append((i + 1, self.lines[i].strip()))

    def result(self) -> ParsedEnv:
        return merge(self.assignments, self.unparsed, self.notes)
