"""Settings written into NCCL's configuration files, which NCCL reads like the environment.

NCCL 2.30's ``initEnvFunc`` (``src/misc/param.cc``) reads ``$NCCL_CONF_FILE`` (since 2.23), else
``~/.nccl.conf``, then ``/etc/nccl.conf``; ``setEnvFile`` skips lines that start with ``#``,
takes everything before the first ``=`` as the name (blanks included) and the rest as the value
(quotes kept), and calls ``setenv(name, value, 0)`` (``src/os/linux.cc``): a variable already in
the environment wins, and so does the first file that sets it. Setup scripts and Dockerfiles
write those files with ``echo K=V >> /etc/nccl.conf``, ``printf``, ``... | tee -a`` and
here-documents; ``written`` and ``heredoc`` read them (shape "nccl.conf"). ``heredoc`` finds the
other here-documents too (a YAML file, a job script), whose bodies the paste reader reads as text
of their own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

from labkit.nccl.shellwords import RAW_ASSIGNMENT, Redirect, Token, Word

SHAPE = "nccl.conf"
SYSTEM_FILE = "/etc/nccl.conf"  # read after the user's file: the lowest precedence
_CONF_PATH = re.compile(r"(?:.*/)?\.?nccl\.conf|\$\{?NCCL_CONF_FILE\}?")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OUTPUT = (">", ">>", ">|", "&>", "&>>")
_WRAPPERS = {"RUN", "sudo", "command", "exec", "nohup", "time"}
_PRINTF_FIELD = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?[sbdiuxXc%]")
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", "r": "\r", "a": "\a"}


class Setting(NamedTuple):
    """One ``NAME=VALUE`` line of a config file, as NCCL reads it."""

    name: str
    value: str
    file: str


def is_conf_file(path: str) -> bool:
    """Whether ``path`` names a file NCCL reads settings from (``*nccl.conf``,
    ``$NCCL_CONF_FILE``)."""
    return _CONF_PATH.fullmatch(path.strip()) is not None


def conf_files_unread(files: set[str], conf_file: str) -> dict[str, tuple[bool, str]]:
    """For each file NCCL may not read: (certainly not read, note). ``conf_file``: the
    NCCL_CONF_FILE the same text sets (initEnvFunc reads it instead of ~/.nccl.conf when it is
    not empty)."""
    notes: dict[str, tuple[bool, str]] = {}
    for file in sorted(files):
        if file == SYSTEM_FILE or re.fullmatch(r"\$\{?NCCL_CONF_FILE\}?", file) or \
                (conf_file and file == conf_file):
            continue
        if conf_file:
            notes[file] = (True, f"{file}: NCCL does not read it, since NCCL_CONF_FILE names "
                           f"{conf_file}, which NCCL reads instead of ~/.nccl.conf: its settings "
                           "are left out")
        elif not file.endswith("/.nccl.conf"):
            notes[file] = (False, f"{file}: NCCL reads this file only when NCCL_CONF_FILE names "
                           "it (NCCL 2.23 and later); by default it reads ~/.nccl.conf and "
                           f"{SYSTEM_FILE}")
    return notes


def conf_settings(text: str, file: str) -> tuple[list[Setting], list[str]]:
    """The settings NCCL's ``setEnvFile`` reads from ``text``, and notes on lines it reads
    differently from a shell."""
    found, notes = [], []
    for line in text.split("\n"):
        line = line.removesuffix("\r")
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        if _NAME.fullmatch(name):
            found.append(Setting(name, value, file))
            if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"":
                notes.append(f"{file}: NCCL keeps the quotes of {name}={value} (its config-file "
                             "reader removes none), so the value includes them")
        elif _NAME.fullmatch(name.strip()):
            notes.append(f"{file}: '{line}': NCCL takes everything before '=' as the name, blanks "
                         f"included, so it sets {name!r}, a name nothing reads; write "
                         f"{name.strip()}={value.strip()}")
    return found, notes


def written(words: list[Word], redirects: list[Redirect],
            piped: str | None) -> tuple[list[Setting], list[str], str | None]:
    """What a command writes into a config file (``echo``/``printf`` with ``>``/``>>``, or
    ``tee`` fed by a pipe), its notes, and what it prints (for a pipe into ``tee``)."""
    words = _without_sudo(words)
    if not words:
        return [], [], None
    command = words[0].value.rsplit("/", 1)[-1]
    if command == "tee" and piped is not None:
        files = [w.value for w in words[1:] if not w.value.startswith("-")]
        return _settings(piped, [f for f in files if is_conf_file(f)]) + (None,)
    if command not in ("echo", "printf"):
        return [], [], None
    printed = _echo(words[1:]) if command == "echo" else _printf(words[1:])
    files = [r.target for r in redirects if r.op in _OUTPUT and is_conf_file(r.target)]
    return _settings(printed, files) + (printed,)


class HereDoc(NamedTuple):
    """A here-document a command reads: its ``delimiter``, the ``file`` the command writes it to
    ("" when none: ``ssh host bash << EOF``), whether ``<<-`` strips leading ``tabs``, and whether
    that file is one of NCCL's config files (``conf``)."""

    delimiter: str
    file: str
    tabs: bool
    conf: bool


def heredoc(tokens: list[Token]) -> HereDoc | None:
    """The first here-document a command in ``tokens`` reads, and where it goes: into a config
    file (``cat > /etc/nccl.conf << EOF``, ``tee -a ~/.nccl.conf <<'EOF'``), another file
    (``cat <<EOF > job.yaml``) or a command."""
    command: list[Word | Redirect] = []
    for token in [*tokens, ";"]:
        if not isinstance(token, str):
            command.append(token)
            continue
        here = next((t for t in command if isinstance(t, Redirect) and t.op in ("<<", "<<-")),
                    None)
        if here is not None and here.target:
            files = [t.target for t in command if isinstance(t, Redirect) and t.op in _OUTPUT]
            words = _without_sudo([t for t in command if isinstance(t, Word)])
            if words and words[0].value.rsplit("/", 1)[-1] == "tee":
                files += [w.value for w in words[1:] if not w.value.startswith("-")]
            conf = next((f for f in files if is_conf_file(f)), None)
            return HereDoc(here.target, conf or next(iter(files), ""), here.op == "<<-",
                           conf is not None)
        command = []
    return None


def heredoc_body(lines: list[str], i: int, delimiter: str, file: str, tabs: bool
                 ) -> tuple[list[tuple[int, str, list[Setting], list[str]]], int]:
    """The body of a here-document written to ``file`` from line index ``i`` on, read as NCCL
    reads it: (line number, line, settings, notes) for each line, and the index after its
    delimiter (``tabs``: ``<<-`` strips leading tabs)."""
    body = []
    while i < len(lines):
        line = lines[i].lstrip("\t") if tabs else lines[i]
        if line == delimiter:
            return body, i + 1
        settings, notes = conf_settings(line, file)
        body.append((i + 1, line, settings, notes))
        i += 1
    return body, i


def _settings(text: str, files: list[str]) -> tuple[list[Setting], list[str]]:
    found: list[Setting] = []
    notes: list[str] = []
    for file in files:
        more, more_notes = conf_settings(text, file)
        found += more
        notes += more_notes
    return found, notes


def _without_sudo(words: list[Word]) -> list[Word]:
    """The command after ``RUN``, ``sudo [-flags]``, ``command`` and prefix assignments."""
    while words and (words[0].value in _WRAPPERS or RAW_ASSIGNMENT.match(words[0].raw)):
        words = words[1:]
        while words and words[0].value.startswith("-"):
            words = words[1:]
    return words


def _echo(args: list[Word]) -> str:
    """What ``echo`` prints: ``-n``/``-e``/``-E`` flags read; ``\\n`` becomes a newline (as
    ``sh``/``dash`` echo and ``echo -e`` do) unless ``-E``."""
    flags = ""
    while args and re.fullmatch(r"-[neE]+", args[0].value):
        flags += args[0].value[1:]
        args = args[1:]
    text = " ".join(w.value for w in args)
    return text if "E" in flags else _unescape(text)


def _printf(args: list[Word]) -> str:
    """What ``printf FORMAT [ARG...]`` prints: the format reused until the arguments run out."""
    values = [w.value for w in args if w.value != "--"]
    if not values:
        return ""
    form, rest = values[0], values[1:]
    fields = len([m for m in _PRINTF_FIELD.findall(form) if m != "%%"])
    out = []
    while True:
        chunk, rest = rest[:fields], rest[fields:]
        out.append(_fill(form, iter(chunk)))
        if not rest or not fields:
            break
    return _unescape("".join(out))


def _fill(form: str, parts: Iterator[str]) -> str:
    """One pass of a printf format, its fields filled from ``parts``."""
    return _PRINTF_FIELD.sub(lambda m: "%" if m.group() == "%%" else next(parts, ""), form)


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group()), text)
