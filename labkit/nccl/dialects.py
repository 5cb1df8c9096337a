"""Set commands of other shells and tools: what each puts in the environment of the processes
started after it (``labkit.nccl.commands`` reads bash's ``export``/``declare`` and csh's
``setenv``; this module reads the rest of the family, each as its own manual describes it).

Commands (``read_command``, given a simple command's words):

- fish ``set``: ``-x``/``--export`` puts the variable in the environment (``-g``, ``-U``, ``-l``,
  ``-f`` only choose a scope); without it the variable stays in fish. ``-e``/``--erase`` removes
  it, ``-u``/``--unexport`` takes it out of the environment, ``-q`` only asks, ``-a``/``-p``
  append to a list whose value the text does not show. A list is exported joined with spaces
  (with ``:`` for a name ending in PATH). bash's own ``set`` (``set -x``, ``set -euo pipefail``,
  ``set -- a b``) sets options and positional parameters, never a variable, so a ``set`` is read
  as fish's only when its options are: a scope letter, a long option, or ``-x NAME VALUE``;
- csh's ``unsetenv NAME``; elvish's ``set-env NAME VALUE`` / ``unset-env NAME``;
- Windows' ``setx NAME VALUE [/M]`` (for sessions started after it, not the one that runs it);
- macOS's ``launchctl setenv NAME VALUE`` / ``unsetenv NAME`` (processes launchd starts);
- ``systemctl [--user] set-environment NAME=VALUE ...`` / ``unset-environment NAME`` (units
  started after it);
- ``conda env config vars set NAME=VALUE ...`` / ``unset NAME`` (set on each activation);
- ``kubectl set env <resource> NAME=VALUE ... NAME-`` (the pod template's ``env``);
- bash's ``export -n NAME`` and ``declare +x NAME`` / ``typeset +x``: taken out of the
  environment, so the processes started after it do not get the variable (read as unset).

Lines (``read_line``, for ``labkit.nccl.paste``): nushell's ``$env.NAME = value``, and ``set
NAME=value``, which three shells read three ways. cmd.exe sets an environment variable: the value
is the rest of the line as written (quotes kept, unless they enclose the whole ``"NAME=value"``).
csh/tcsh (and Tcl, in module files) set a shell variable that programs started from the shell
never see (``setenv`` is the one that exports). bash sets its positional parameters. Which shell
wrote the text is told by the text (``dialect``): cmd.exe's ``@echo off``, ``rem``, ``::``,
``%NAME%``; a csh shebang, ``setenv``/``unsetenv``, ``endif``, a Tcl module file's ``#%Module``.
With neither, a ``set NAME=value`` line is read as before: a setting, as the sentence "set
NAME=value" means.
"""

from __future__ import annotations

import re

from labkit.nccl.shellwords import Word, split_words, tilde_expands

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)
# fish's set options: scope letters, the export switches, and the rest (fish's manual, "set")
_FISH_SCOPE = set("glUf")
_FISH_LETTERS = set("glUfxuqeapnSL")
_FISH_LONG = {"--global", "--local", "--universal", "--function", "--export", "--unexport",
              "--erase", "--query", "--append", "--prepend", "--path", "--unpath"}
_SETX_OPTIONS = {"/s", "/u", "/p"}  # each takes a value; /m stands alone
_CMD_MARKS = re.compile(r"^[ \t]*(?:@?echo[ \t]+off\b|rem(?:[ \t]|$)|::|setlocal\b|endlocal\b|"
                        r"goto[ \t]|call[ \t]+:?\S)|%[A-Za-z_][A-Za-z0-9_]+%",
                        re.IGNORECASE | re.MULTILINE)
_CSH_MARKS = re.compile(r"^(?:#!\S*(?:/|\s)t?csh\b|#%Module)|^[ \t]*(?:setenv|unsetenv)[ \t]|"
                        r"^[ \t]*(?:endif|endsw|foreach[ \t]|source[ \t]+\S*\.t?cshrc)\b",
                        re.MULTILINE)
_SET_LINE = re.compile(r"[ \t]*(?:@[ \t]*)?set[ \t]+(?!/)(\"?)([A-Za-z_][A-Za-z0-9_]*)"
                       r"([ \t]*)=(.*)", re.IGNORECASE)
_NU_ENV = re.compile(r"[ \t]*\$env\.([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*(.+?)[ \t]*")
CMD, CSH = "cmd.exe", "csh"
SHELL_TILDE, BASH_TILDE = "shell", "bash"  # as labkit.nccl.commands names them
UNEXPORTED = "fish set (not exported)"
UNEXPORTED_NOTE = ("fish 'set' without -x/--export keeps {name} a variable of fish: the programs "
                   "it starts (and NCCL in them) do not see it; 'set -gx {name} value' exports it")
Read = tuple[str, str | None, str, str]  # name, value (None: unset or not shown), shape, tilde


def dialect(text: str) -> str:
    """Which shell wrote ``text``, where its ``set`` lines need to know: ``CMD``, ``CSH``, or ""
    when nothing in the text says."""
    if "set" not in text.lower():
        return ""
    if _CSH_MARKS.search(text):
        return CSH
    return CMD if _CMD_MARKS.search(text) else ""


def read_line(line: str, shell: str) -> tuple[list[tuple[str, str | None, str]], str] | None:
    """What one line sets, as (name, value, shape) triples, and a note; None when the line is
    not one of this module's line shapes (see the module docstring)."""
    nu = _NU_ENV.fullmatch(line)
    if nu:
        value = nu.group(2)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif not re.fullmatch(r"[\w./:,+-]+", value):
            return [(nu.group(1), None, "nushell $env")], ""  # an expression: its value not shown
        return [(nu.group(1), value, "nushell $env")], ""
    match = _SET_LINE.fullmatch(line) if shell else None
    if match is None:
        return None
    quote, name, blank, rest = match.groups()
    if shell == CSH:
        return [], (f"csh 'set {name}{blank}=...' makes a shell variable: programs started from "
                    f"the shell (and NCCL in them) never see it; 'setenv {name} value' exports it")
    if blank:  # cmd.exe: "set NAME =v" names a variable "NAME " (with the blank)
        return [], f"cmd.exe reads 'set {name}{blank}=' as a variable named '{name}{blank}'"
    value = rest.rstrip("\r")
    if quote:  # set "NAME=value" -> up to the last quote
        value = value[:value.rfind('"')] if '"' in value else value
    note = "cmd.exe keeps the quotes in the value" if not quote and '"' in value else ""
    return [(name, value, "cmd set")], note


def read_command(words: list[Word]) -> list[Read] | None:
    """What the simple command ``words`` sets (name, value or None, shape, which shells expand a
    ``~`` opening the value), a value None with the shape "unset" removing it; None when it is
    none of this module's commands."""
    command = words[0].value.rsplit("/", 1)[-1]
    args = words[1:]
    if command == "set":
        return _fish_set(args)
    if command in ("unsetenv", "unset-env"):
        return [(w.value, None, "unset", "") for w in args if NAME.fullmatch(w.value)]
    if command == "set-env" and args and NAME.fullmatch(args[0].value):
        return _pairs(args, False, "elvish set-env")
    if command.lower() in ("setx", "setx.exe"):
        return _setx(args)
    if command == "launchctl" and len(args) >= 2 and args[0].value in ("setenv", "unsetenv"):
        return _pairs(args[1:], args[0].value == "unsetenv", "launchctl setenv")
    if command == "systemctl":
        rest = [w for w in args if not w.value.startswith("-")]
        if rest and rest[0].value in ("set-environment", "unset-environment"):
            return _assignments(rest[1:], rest[0].value == "unset-environment",
                                "systemctl set-environment")
    if command in ("conda", "mamba", "micromamba"):
        plain = [w.value for w in args[:4]]
        if plain[:3] == ["env", "config", "vars"] and len(plain) == 4 and \
                plain[3] in ("set", "unset"):
            values = [w for w in args[4:] if not w.value.startswith("-")]
            return _assignments(values, plain[3] == "unset", "conda env config vars")
    if command == "kubectl" and [w.value for w in args[:2]] == ["set", "env"]:
        return _kubectl_set_env(args[2:])
    if command in ("export", "declare", "typeset"):
        return _unexport(command, args)
    return None


def _fish_set(args: list[Word]) -> list[Read] | None:
    flags, i = [], 0
    while i < len(args) and args[i].value.startswith("-") and args[i].value != "--":
        flags.append(args[i].value)
        i += 1
    i += i < len(args) and args[i].value == "--"
    rest = args[i:]
    letters = {c for f in flags if not f.startswith("--") for c in f[1:]}
    longs = {f for f in flags if f.startswith("--")}
    if not flags or not letters <= _FISH_LETTERS or not longs <= _FISH_LONG:
        return None  # bash's set (options, positional parameters), or not a set at all
    exported = "x" in letters or "--export" in longs
    if not (letters & _FISH_SCOPE or longs or (letters == {"x"} and len(rest) >= 2)):
        return None  # set -x / set -e / set -u alone: bash's trace, errexit, nounset
    if not rest or not NAME.fullmatch(rest[0].value):
        return []
    name = rest[0].value
    if letters & {"e"} or "--erase" in longs or letters & {"u"} or "--unexport" in longs:
        return [(w.value, None, "unset", "") for w in rest if NAME.fullmatch(w.value)]
    if letters & {"q"} or "--query" in longs:
        return []  # a query: sets nothing
    if not exported:  # a variable of fish only: named, so that a report can say why it is not set
        return [(name, None, UNEXPORTED, "")]
    if letters & {"a", "p"} or longs & {"--append", "--prepend"}:
        return [(name, None, "fish set -x", "")]  # a list grown from a value not shown here
    joiner = ":" if name.endswith("PATH") else " "
    tilde = SHELL_TILDE if len(rest) > 1 and tilde_expands(rest[1].raw) else ""
    return [(name, joiner.join(w.value for w in rest[1:]) if len(rest) > 1 else None,
             "fish set -x", tilde)]


def _setx(args: list[Word]) -> list[Read]:
    plain: list[Word] = []
    skip = False
    for word in args:
        lower = word.value.lower()
        if skip:
            skip = False
        elif lower in _SETX_OPTIONS:
            skip = True
        elif lower in ("/k", "/f", "/a", "/r", "/x", "/d"):
            return []  # a value read from the registry or a file: not shown here
        elif lower != "/m":
            plain.append(word)
    if not plain or not NAME.fullmatch(plain[0].value):
        return []
    raw = plain[1].raw if len(plain) > 1 else ""
    value = raw[1:-1] if len(raw) >= 2 and raw[0] == raw[-1] == '"' else raw  # cmd keeps "\"
    return [(plain[0].value, value, "setx", "")]


def _pairs(args: list[Word], unset: bool, shape: str) -> list[Read]:
    """NAME VALUE (or NAME alone, to unset); the shell expands a ``~`` opening the VALUE word."""
    if not NAME.fullmatch(args[0].value):
        return []
    if unset:
        return [(args[0].value, None, "unset", "")]
    tilde = SHELL_TILDE if len(args) > 1 and tilde_expands(args[1].raw) else ""
    return [(args[0].value, args[1].value if len(args) > 1 else "", shape, tilde)]


def _assignments(args: list[Word], unset: bool, shape: str) -> list[Read]:
    """NAME=VALUE arguments: bash expands a ``~`` after their ``=`` (sh and zsh do not)."""
    if unset:
        return [(w.value, None, "unset", "") for w in args if NAME.fullmatch(w.value)]
    return [(m.group(1), m.group(2), shape,
             BASH_TILDE if tilde_expands(w.raw.partition("=")[2]) else "")
            for w in args if (m := _ASSIGNMENT.fullmatch(w.value))]


def _kubectl_set_env(args: list[Word]) -> list[Read]:
    found: list[Read] = []
    for word in args:
        value = word.value.removeprefix("--env=") if word.value.startswith("--env=") else \
            word.value
        match = _ASSIGNMENT.fullmatch(value)
        if match and not value.startswith("-"):
            found.append((match.group(1), match.group(2), "kubectl set env", ""))
        elif value.endswith("-") and NAME.fullmatch(value[:-1]):
            found.append((value[:-1], None, "unset", ""))
    return found


def _unexport(command: str, args: list[Word]) -> list[Read] | None:
    """``export -n``, ``declare +x``: the names leave the environment (None: not that form)."""
    options = [w.value for w in args if w.value[:1] in "-+" and w.value != "--"]
    if command == "export" and not any("n" in o[1:] for o in options if o.startswith("-")):
        return None
    if command != "export" and "+x" not in options and not any(
            o.startswith("+") and "x" in o for o in options):
        return None
    names = [_ASSIGNMENT.match(w.value).group(1) if "=" in w.value else w.value
             for w in args if w.value[:1] not in "-+"]
    return [(name, None, "unset", "") for name in names if NAME.fullmatch(name)]


def split_string(text: str) -> list[Word]:
    """The words of ``env -S``'s string (GNU env splits it as a shell would, quotes removed)."""
    result = split_words(text, 0, len(text))
    return [t for t in result[0] if isinstance(t, Word)] if result else []
