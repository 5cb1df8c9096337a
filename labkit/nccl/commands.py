"""What shell commands set: the second step in reading a pasted env line.

``read_commands(tokens)`` (tokens from ``shellwords.split_words``) finds what each simple command
sets: ``export``/``declare -x``/``readonly``/Dockerfile ``ENV``/``%env``, prefix assignments
(``A=1 B=2 cmd``), ``env``/``sudo`` assignments, ``unset``, csh ``setenv``, and launcher options
anywhere in the command: ``mpirun -x``/``-genv``, ``docker``/``podman``/``kubectl``
``-e``/``--env``, ``apptainer --env``, ``srun``/``sbatch --export=``, and the scripts that run
inside a command: ``bash -c '...'``, ``$(...)`` substitutions, and quoted strings that are shell
statements (``cmd = "export A=1; export B=2"``). ``echo``/``printf``/``tee`` into NCCL's config
files are read by ``labkit.nccl.ncclconf``, other shells' and tools' set commands (fish ``set
-gx``, ``setx``, ``launchctl setenv``, ``systemctl set-environment``, ``export -n`` ...) by
``labkit.nccl.dialects``, and ``env -S``'s string is split into the words it holds.
``slurm_export`` splits ``--export`` lists as Slurm's ``_find_quote_token`` does.

``Found.tilde`` says whether the shell replaces a ``~`` that opens the value with a home
directory (bash manual, "Tilde Expansion"): ``SHELL_TILDE`` where every shell does (an
assignment, an argument of ``export``/``declare``/``readonly``/``local``, a word that opens with
``~``), ``BASH_TILDE`` where bash does outside POSIX mode (an argument that looks like an
assignment: ``mpirun -x NAME=~/x``, ``docker run -e NAME=~/x``, ``env NAME=~/x``; ``sh`` and
``zsh`` keep the ``~``). Quoted (``"~/x"``), or after ``--export=``/``--env=``, it stays literal.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from labkit.nccl import dialects, ncclconf
from labkit.nccl.shellwords import (
    RAW_ASSIGNMENT,
    Redirect,
    Token,
    Word,
    split_words,
    substitutions,
    tilde_expands,
)

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")  # a name given alone (mpirun -x NAME): env style only
ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)
# The names a reader watches for (a regex): the prefixes of NCCL, torch, gloo, the network
# plugins and the libraries around them, and the launcher's rank variables.
WATCHED = (r"(?:NCCL|TORCH|GLOO|FI|OFI|UCX|CUDA|MASTER|PYTORCH|TORCHELASTIC|NVSHMEM|RCCL|OMPI)"
           r"_[A-Z0-9_]*[A-Z0-9]|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE")
_KEYWORDS = {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "}", "RUN", "nohup",
             "time", "exec", "command", "builtin"}
_DECLARES = {"export", "declare", "typeset", "readonly", "local", "ENV", "%env"}
_MPI = {"mpirun", "mpiexec", "orterun", "oshrun", "prterun", "mpiexec.hydra"}
_CONTAINERS = {"docker", "podman", "nerdctl", "docker-compose", "kubectl"}
_APPTAINER = {"apptainer", "singularity"}
_SLURM = {"srun", "sbatch", "salloc"}
_SHELLS = {"bash", "sh", "zsh", "dash", "ksh"}
_SUDO_WITH_ARGUMENT = {"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "--user", "--group"}
# A quoted string that is shell statements: it starts with export/env NAME=, or has an
# ``export NAME=`` after a ; & | or newline.
_SCRIPT = re.compile(r"\s*(?:export|env)\s+(?:-\S+\s+)*[A-Za-z_]\w*=|[\s\S]*?[;&|\n]\s*export\s+"
                     r"[A-Za-z_]\w*=")
# ... or a launcher command held in a variable: cmd="${MPI} -np 2 -x NCCL_DEBUG=INFO ./run".
_LAUNCH_OPTION = re.compile(r"(?:^|\s)(?:-x|-genv|-e|--env)\s+[A-Z_][A-Z0-9_]*=")
# ... or prefix assignments held in a variable for a command line built later (run with
# eval, env, or a launcher): OPTS="NCCL_DEBUG=INFO NCCL_IB_DISABLE=0" (every word NAME=VALUE).
_PREFIXES = re.compile(r"\s*(?:[A-Za-z_]\w*=\S*\s+)*[A-Za-z_]\w*=\S*\s*")
SHELL_TILDE = "shell"  # every shell expands the ~ (an assignment, a word that opens with it)
BASH_TILDE = "bash"  # bash outside POSIX mode expands it (an argument that looks like NAME=~/x)


class Found(NamedTuple):
    """A variable one command sets: ``value`` None when only named (``mpirun -x NAME``: the value
    comes from elsewhere) or, with shape "unset", removed; ``file``: the config file it was
    written to (shape "nccl.conf"); ``tilde``: which shells expand a ``~`` opening the value
    (``SHELL_TILDE``, ``BASH_TILDE``, or "" when it stays literal)."""

    name: str
    value: str | None
    shape: str
    file: str = ""
    tilde: str = ""


def _tilde(word: Word, kind: str) -> str:
    """``kind`` when the shell expands a ``~`` opening the value of the assignment-like
    ``word`` (``NAME=~/x`` as written), else ""."""
    return kind if tilde_expands(word.raw.partition("=")[2]) else ""


def read_commands(tokens: list[Token], depth: int = 0) -> tuple[list[Found], list[str]]:
    """What the simple commands in ``tokens`` set, in order, and notes on what they set oddly."""
    found: list[Found] = []
    notes: list[str] = []
    command: list[Word] = []
    redirects: list[Redirect] = []
    piped: str | None = None  # what the command before a | printed
    for token in [*tokens, ";"]:
        if isinstance(token, Word):
            command.append(token)
        elif isinstance(token, Redirect):
            redirects.append(token)
        else:
            printed = _read_command(command, redirects, found, notes, depth, piped) \
                if command else None
            piped = printed if token == "|" else None
            command, redirects = [], []
    return found, notes


def _read_command(words: list[Word], redirects: list[Redirect], found: list[Found],
                  notes: list[str], depth: int, piped: str | None) -> str | None:
    """One simple command: its prefix assignments, then what its command word sets; what it
    prints, when that is known (``echo``, ``printf``), for a pipe into ``tee``."""
    i = 0
    while i < len(words) and words[i].raw in _KEYWORDS:
        i += 1
    first = i
    while i < len(words) and RAW_ASSIGNMENT.match(words[i].raw):
        i += 1
    shape = "K=V" if i == len(words) else "prefix"
    for word in words[first:i]:
        name, _, value = word.value.partition("=")
        found.append(Found(name.rstrip("+"), value, shape, tilde=_tilde(word, SHELL_TILDE)))
        _read_inner(word, found, notes, depth)
    if i == len(words):
        return None
    conf, conf_notes, printed = ncclconf.written(words[i:], redirects, piped)
    found += [Found(s.name, s.value, ncclconf.SHAPE, s.file) for s in conf]
    notes += conf_notes
    if conf:
        return printed
    command = words[i].value
    other = dialects.read_command(words[i:])
    if other is not None:  # fish set, setx, launchctl, systemctl, conda, kubectl set env ...
        found += [Found(name, value, shape, tilde=tilde) for name, value, shape, tilde in other]
        notes += [dialects.UNEXPORTED_NOTE.format(name=n) for n, _, shape, _ in other
                  if shape == dialects.UNEXPORTED]
    elif command in _DECLARES:
        _read_declare(command, words[i + 1:], found)
        for word in words[i + 1:]:
            _read_inner(word, found, notes, depth)
    elif command == "unset":
        if not any(w.value[:1] == "-" and "f" in w.value for w in words[i + 1:]):  # -f: functions
            found += [Found(w.value, None, "unset") for w in words[i + 1:]
                      if NAME.fullmatch(w.value)]
    elif command == "setenv" and len(words) > i + 1 and NAME.fullmatch(words[i + 1].value):
        tilde = SHELL_TILDE if len(words) > i + 2 and tilde_expands(words[i + 2].raw) else ""
        found.append(Found(words[i + 1].value, " ".join(w.value for w in words[i + 2:]),
                           "setenv", tilde=tilde))
    else:
        _read_launchers(words[i:], found, notes, depth)
    return printed


def _read_inner(word: Word, found: list[Found], notes: list[str], depth: int) -> None:
    """The scripts that run inside a word: a quoted string that is shell statements, else its
    ``$(...)`` substitutions (``OUT=$(NCCL_P2P_DISABLE=1 ./all_reduce_perf)``)."""
    if depth >= 3 or ("$(" not in word.value and "`" not in word.value and
                      "export" not in word.value and "env" not in word.value and
                      not _LAUNCH_OPTION.search(word.value) and
                      not _held_prefixes(word.value.partition("=")[2])):
        return
    script = quoted_script(word)
    for text in [script] if script is not None else substitutions(word.value):
        inner, inner_notes = read_script(text, depth + 1)
        found += inner
        notes += inner_notes


def quoted_script(word: Word) -> str | None:
    """The text of a quoted word (or of an assignment's quoted value) when it is shell
    statements: ``"export A=1;export B=2"``, ``'env A=1 ./run'``."""
    raw, value = word.raw, word.value
    if RAW_ASSIGNMENT.match(raw):
        raw, value = raw.partition("=")[2], value.partition("=")[2]
    if not raw.startswith(("'", '"', "$'")):
        return None
    return value if _SCRIPT.match(value) or _LAUNCH_OPTION.search(value) \
        or _held_prefixes(value) else None


def _held_prefixes(value: str) -> bool:
    """Whether ``value`` is only ``NAME=VALUE`` words, one of them a watched name: prefix
    assignments kept in a variable for the command line a script builds and runs."""
    return "=" in value and _PREFIXES.fullmatch(value) is not None and \
        re.search(rf"(?:^|\s)(?:{WATCHED})=", value) is not None


def _read_declare(command: str, args: list[Word], found: list[Found]) -> None:
    """``export``/``declare``/``readonly``/``ENV``/``%env`` arguments: ``NAME=VALUE`` sets,
    ``NAME`` alone exports the current value (``export``/``declare -x`` only)."""
    flags = "".join(w.value[1:] for w in args if w.value.startswith(("-", "+")))
    args = [w for w in args if not w.value.startswith(("-", "+"))]
    if (command == "export" and set(flags) & set("nfp")) or set(flags) & set("aAfFp"):
        return  # functions, arrays, printing: nothing set (export -n: labkit.nccl.dialects)
    exports = command == "export" or "x" in flags
    shape = {"ENV": "Dockerfile ENV", "%env": "%env"}.get(command) or (
        "export" if command == "export" else "declare -x" if "x" in flags else "declare")
    if command in ("ENV", "%env") and args and "=" not in args[0].value:
        found.append(Found(args[0].value, " ".join(w.value for w in args[1:]), shape))
        return
    literal = command in ("ENV", "%env")  # Docker and IPython expand no ~
    for word in args:
        match = ASSIGNMENT.fullmatch(word.value)
        if match:
            found.append(Found(match.group(1), match.group(2), shape,
                               tilde="" if literal else _tilde(word, SHELL_TILDE)))
        elif exports and NAME.fullmatch(word.value):
            found.append(Found(word.value, None, shape))


def _read_launchers(words: list[Word], found: list[Found], notes: list[str], depth: int) -> None:
    """Options of launchers anywhere in the command (``srun ... env A=1 mpirun -x B ...``). A
    command that starts with an option is the tail of one whose first line was not pasted (or
    sits in a YAML string): its ``-x`` and ``-e`` are read as mpirun's and docker's."""
    scope = "fragment" if words[0].value.startswith("-") or words[0].raw.startswith("$") else ""
    j = 0
    while j < len(words):
        _read_inner(words[j], found, notes, depth)
        value = words[j].value
        following = words[j + 1].value if j + 1 < len(words) else None
        base = value.rsplit("/", 1)[-1]
        if base in ("env", "sudo"):
            j = _read_env_words(words, j + 1, base, found)
            other = dialects.read_command(words[j:]) if j < len(words) else None
            if other is not None:  # sudo systemctl set-environment ..., env setx ...
                found += [Found(n, v, shape, tilde=t) for n, v, shape, t in other]
                return
            scope = ""
            continue
        if base in _MPI | _CONTAINERS | _APPTAINER | _SLURM:
            scope = base
        elif base in _SHELLS and j + 2 < len(words) and re.fullmatch(r"-\w*c\w*", following or ""):
            if depth < 3:
                inner, inner_notes = read_script(words[j + 2].value, depth + 1)
                found += inner if base == "bash" else [  # sh, zsh: no ~ after NAME= in arguments
                    f._replace(tilde="") if f.tilde == BASH_TILDE else f for f in inner]
                notes += inner_notes
            j += 3
            continue
        elif scope in _MPI or (scope == "fragment" and value in ("-x", "-genv", "-env")):
            j += _mpi_option(value, words[j + 1:j + 3], found)
        elif (scope in _CONTAINERS or scope == "fragment") and (
                value.startswith(("-e", "--env=")) or value == "--env"):
            tilde = ""
            if value in ("-e", "--env"):
                if following is not None:
                    tilde = _tilde(words[j + 1], BASH_TILDE)
                text, j = following, j + 1
            else:  # --env=A=1, -eA=1, -e=A=1
                text = value[6:] if value.startswith("--env=") else value[2:].removeprefix("=")
            if text is not None:
                _name_or_assignment(text, "docker -e", found, tilde=tilde)
        elif scope in _APPTAINER and (value == "--env" or value.startswith("--env=")):
            text = following if value == "--env" else value[6:]
            tilde = _tilde(words[j + 1], BASH_TILDE) if value == "--env" and following else ""
            j += value == "--env"
            for n, part in enumerate(split_list(text or "")):  # bash expands after the first =
                _name_or_assignment(part, "apptainer --env", found, named=False,
                                    tilde="" if n else tilde)
        elif scope in _SLURM and (value == "--export" or value.startswith("--export=")):
            text = following if value == "--export" else value[9:]
            tilde = _tilde(words[j + 1], BASH_TILDE) if value == "--export" and following else ""
            j += value == "--export"
            notes += slurm_export(text or "", found, tilde)
        j += 1


def _mpi_option(option: str, after: list[Word], found: list[Found]) -> int:
    """How many words after ``option`` it takes: ``-x NAME[=VALUE]``, ``-genv NAME VALUE``."""
    if option == "-x" and after:
        _name_or_assignment(after[0].value, "mpirun -x", found,
                            tilde=_tilde(after[0], BASH_TILDE))
        return 1
    if option in ("-genv", "-env") and after:
        if "=" in after[0].value:
            _name_or_assignment(after[0].value, "mpirun -genv", found,
                                tilde=_tilde(after[0], BASH_TILDE))
            return 1
        if len(after) == 2 and NAME.fullmatch(after[0].value):
            found.append(Found(after[0].value, after[1].value, "mpirun -genv",
                               tilde=SHELL_TILDE if tilde_expands(after[1].raw) else ""))
            return 2
    if option == "-genvlist" and after:
        for part in after[0].value.split(","):
            _name_or_assignment(part, "mpirun -genvlist", found)
        return 1
    return 0


def _read_env_words(words: list[Word], j: int, command: str, found: list[Found]) -> int:
    """``env``/``sudo`` options and ``NAME=VALUE`` words; the index of the command they run."""
    while j < len(words):
        value = words[j].value
        if RAW_ASSIGNMENT.match(words[j].raw):
            name, _, rest = value.partition("=")
            found.append(Found(name, rest, command, tilde=_tilde(words[j], BASH_TILDE)))
        elif command == "env" and value in ("-u", "--unset") and j + 1 < len(words):
            found.append(Found(words[j + 1].value, None, "unset"))
            j += 1
        elif command == "env" and value.startswith(("-S", "--split-string")):
            text = value[2:] if value.startswith("-S") else value.partition("=")[2]
            if not text and j + 1 < len(words) and "=" not in value:
                j += 1
                text = words[j].value
            inner = dialects.split_string(text)  # env -S 'A=1 B=2 cmd': one argument, split
            before = len(found)
            k = _read_env_words(inner, 0, command, found)
            found[before:] = [f._replace(tilde="") for f in found[before:]]  # env expands no ~
            if k < len(inner):  # the command it runs is in the string too
                found += read_commands(list(inner[k:]), 1)[0]
                return len(words)
        elif value in _SUDO_WITH_ARGUMENT or (command == "env" and value == "-C"):
            j += 1
        elif not value.startswith("-"):
            break
        j += 1
    return j


def _name_or_assignment(text: str, shape: str, found: list[Found], named: bool = True,
                        tilde: str = "") -> None:
    """``NAME=VALUE`` sets, an env-style ``NAME`` alone passes the caller's value on."""
    match = ASSIGNMENT.fullmatch(text)
    if match:
        found.append(Found(match.group(1), match.group(2), shape, tilde=tilde))
    elif named and ENV_NAME.fullmatch(text):
        found.append(Found(text, None, shape))


def split_list(text: str) -> list[str]:
    """Split a comma list as Slurm's ``_find_quote_token`` does (sbatch/srun ``--export``): a
    comma inside quotes does not split, and quotes are removed only around a whole part."""
    parts, current, quote = [], [], ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == ",":
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return [_unquote(part.strip()) for part in parts]


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def slurm_export(text: str, found: list[Found], tilde: str = "") -> list[str]:
    """``--export=ALL,A=1,B``: ``A`` set, ``B`` passed on from the submitting shell. ``tilde``
    applies to the first part only (``--export A=~/x,B=~/y``: bash expands after the first =)."""
    notes = []
    for n, part in enumerate(split_list(text)):
        if part.upper() in ("", "ALL", "NONE", "NIL"):
            continue
        match = ASSIGNMENT.fullmatch(part)
        if match:
            found.append(Found(match.group(1), match.group(2), "srun --export",
                               tilde="" if n else tilde))
        elif ENV_NAME.fullmatch(part):
            found.append(Found(part, None, "srun --export"))
        else:
            notes.append(f"--export: Slurm splits at every comma, so it reads {part!r} as the "
                         "name of a variable to pass on, not as part of the value before it; "
                         "export the variable in the shell and pass only its name "
                         "(--export=ALL,NAME)")
    return notes


def read_script(text: str, depth: int = 0) -> tuple[list[Found], list[str]]:
    """What a whole script (``bash -c``'s argument) sets; unreadable lines are skipped."""
    found: list[Found] = []
    notes: list[str] = []
    i = 0
    while i < len(text):
        result = split_words(text, i, len(text))
        if result is None:
            newline = text.find("\n", i)
            i = len(text) if newline < 0 else newline + 1
            continue
        tokens, i = result
        more, more_notes = read_commands(tokens, depth)
        found += more
        notes += more_notes
    return found, notes
