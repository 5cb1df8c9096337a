"""PowerShell's ways of setting an environment variable, read with PowerShell's own quoting rules.

    $env:NAME = "value"          $Env:NAME='value'        ${env:NAME} = 8
    $env:NAME += ";more"         (appends to the current value: computed, not checked)
    $env:NAME = $null            Remove-Item Env:NAME     (remove it: "unset")
    [Environment]::SetEnvironmentVariable("NAME", "value"[, "Process" | "User" | "Machine"])
    Set-Item -Path Env:NAME -Value value      Set-Item Env:\\NAME "value"      (alias si)
    New-Item -Path Env: -Name NAME -Value value                                (alias ni)

(about_Environment_Variables, the Environment provider, System.Environment). Each is found
anywhere on a line (after a ``PS C:\\>`` prompt, in an inline code span, in a YAML ``run:``), and a
line holds as many statements as it has (``;`` separates them).

Quoting, as PowerShell reads it (about_Quoting_Rules, about_Special_Characters): ``'...'`` is
literal, ``''`` inside it one quote; ``"..."`` expands ``$name``, ``${...}`` and ``$(...)``, kept
as written (as the shell reader keeps ``$VAR``: the checker then says the value is computed), and
takes the backtick as its escape character (`` `n``, `` `t``, `` `" ``, `` `$ ``, ``` `` ```), with
``""`` for one ``"``. PowerShell also takes the typographic quotes ‘ ’ ‚ ‛ and “ ” „ as quotes.
An integer is its decimal digits (``0x10`` is 16), ``$true``/``$false`` are True/False, ``$null``
removes the variable, ``''`` removes it before PowerShell 7.5 and sets it empty from 7.5 on (read
as empty, which NCCL treats as unset). Anything else (``$env:A``, a command, ``"a" + $b``) is
computed: named, value not given. ``#`` starts a comment and a backtick at the end of a line
continues it (the reader sees one line at a time, so the statement ends there).

``SetEnvironmentVariable(..., "User"|"Machine")`` writes the registry, not the current session:
programs started from this window do not get the value (on Linux and macOS .NET ignores those
targets). The value is read, as the one the author means jobs to get, with a note saying so.
"""

from __future__ import annotations

import re

from labkit.nccl.commands import Found

HINT = re.compile(r"(?i)\$\{?env:|SetEnvironmentVariable|\b(?:set|new|remove)-item\b|"
                  r"(?:^|[\s;(`])(?:si|ni|ri|rm|del|erase)\s+(?:-\w+\s+)?['\"]?env:")
_VARIABLE = re.compile(r"(?i)(?:\$\{env:([A-Za-z_]\w*)\}|\$env:([A-Za-z_]\w*))\s*(\+?)=(?!=)")
_METHOD = re.compile(r"(?i)\[(?:System\.)?Environment\]::SetEnvironmentVariable\s*\(")
_CMDLET = re.compile(r"(?i)(?:^|(?<=[\s;(`|{]))(set-item|si|new-item|ni|remove-item|ri|rm|del|erase)"
                     r"(?=\s)")
_SINGLE = "'\u2018\u2019\u201a\u201b"
_DOUBLE = '"\u201c\u201d\u201e'
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "a": "\a", "b": "\b", "e": "\x1b",
            "f": "\f", "v": "\v"}
_BARE = re.compile(r"""[^\s;,()#|'"\u2018\u2019\u201a\u201b\u201c\u201d\u201e`]+""")
_END = re.compile(r"\s*(?:$|[;#|}])")
_INTEGER = re.compile(r"[+-]?(?:0[xX][0-9a-fA-F]+|\d+)(?![\w.])")
_TARGET = re.compile(r"(?i)\b(Process|User|Machine)\b")
SHAPES = {"variable": "powershell $env:", "method": "powershell SetEnvironmentVariable",
          "set-item": "powershell Set-Item", "new-item": "powershell New-Item"}
PERSISTENT_NOTE = ("[Environment]::SetEnvironmentVariable(..., '{target}') writes {name} to the "
                   "{target} environment in the registry, not to this session: programs started "
                   "from this window (or by a script after this line) do not get it, only ones "
                   "started after a new sign-in or from a new Explorer window (on Linux and macOS "
                   ".NET ignores the {target} target); use $env:{name} = ... for this session")


def read_line(line: str) -> tuple[list[Found], list[str]] | None:
    """The PowerShell environment settings on ``line`` and notes on them; None when the line
    holds none (it is then not PowerShell, or sets no environment variable)."""
    if "env:" not in line.lower() and "EnvironmentVariable" not in line or \
            not HINT.search(line):  # every shape names the Env: drive or the method
        return None
    text = _code_span_text(line)
    found: list[Found] = []
    notes: list[str] = []
    for match in _VARIABLE.finditer(text):
        name = match.group(1) or match.group(2)
        value, literal = _value(text, match.end())
        if value is _NULL:
            found.append(Found(name, None, "unset"))
        elif match.group(3):  # += appends to the current value: computed
            found.append(Found(name, f"$env:{name}{value}" if literal else None,
                               SHAPES["variable"]))
        else:
            found.append(Found(name, value if literal else None, SHAPES["variable"]))
    for match in _METHOD.finditer(text):
        _method(text, match.end(), found, notes)
    for match in _CMDLET.finditer(text):
        _cmdlet(match.group(1).lower(), text, match.end(), found)
    return (found, notes) if found else None


def _code_span_text(line: str) -> str:
    """The line, with a Markdown code span's closing backquote (and what follows it) blanked
    where a statement sits inside one: a backquote there ends the span, not a PowerShell escape."""
    if line.count("`") < 2 or not HINT.search(line):
        return line
    spans = [m for m in re.finditer(r"`([^`]+)`", line) if HINT.search(m.group(1))]
    if not spans:
        return line
    return " ; ".join(m.group(1) for m in spans)


class _Null:
    """``$null``: assigning it removes the variable."""


_NULL = _Null()


def _value(text: str, i: int) -> tuple[object, bool]:
    """The expression at ``text[i:]`` up to the statement's end: (its string value, True) when
    it is a literal, (``_NULL``, True) for ``$null``, (None, False) when it is computed."""
    while i < len(text) and text[i] in " \t":
        i += 1
    token = _literal(text, i)
    if token is None:
        return None, False
    value, end = token
    if not _END.match(text, end):
        return None, False  # "a" + $b, a method call, a pipeline...
    return value, True


def _literal(text: str, i: int) -> tuple[object, int] | None:
    """A string, integer, $true/$false/$null at ``i``: (its value, the index after it)."""
    if i >= len(text):
        return None
    if text[i] in _SINGLE or text[i] in _DOUBLE:
        return _string(text, i)
    lowered = text[i:i + 6].lower()
    for word, value in (("$true", "True"), ("$false", "False"), ("$null", _NULL)):
        if lowered.startswith(word) and not text[i + len(word):i + len(word) + 1].isalnum():
            return value, i + len(word)
    number = _INTEGER.match(text, i)
    if number:
        return str(int(number.group(), 0)), number.end()
    return None


def _string(text: str, i: int) -> tuple[str, int] | None:
    """A quoted string at ``i``: single-quoted literal, double-quoted with backtick escapes."""
    single = text[i] in _SINGLE
    quotes = _SINGLE if single else _DOUBLE
    out, j = [], i + 1
    while j < len(text):
        char = text[j]
        if char in quotes:
            if j + 1 < len(text) and text[j + 1] in quotes:  # '' or "" inside: one quote
                out.append(char)
                j += 2
                continue
            return "".join(out), j + 1
        if char == "`" and not single and j + 1 < len(text):
            following = text[j + 1]
            out.append(_ESCAPES.get(following, following))
            j += 2
            continue
        out.append(char)
        j += 1
    return None


def _arguments(text: str, i: int) -> tuple[list[tuple[object, str]], int]:
    """The words of a command or of a method's argument list from ``i``: (value, raw) pairs,
    value None when computed; "," and "(" ")" come through as raw-only items; stops at the
    statement's end (``;``, ``#``, ``|``) or at the ``)`` closing the list."""
    words: list[tuple[object, str]] = []
    depth = 0
    while i < len(text):
        char = text[i]
        if char in " \t":
            i += 1
            continue
        if char in ";#|" or (char == ")" and depth == 0):
            break
        if char in ",()":
            depth += {"(": 1, ")": -1}.get(char, 0)
            words.append((None, char))
            i += 1
            continue
        literal = _literal(text, i)
        if literal is not None and (literal[1] >= len(text) or text[literal[1]] in " \t,;)#|"):
            words.append((literal[0], text[i:literal[1]]))
            i = literal[1]
            continue
        bare = _BARE.match(text, i)
        end = bare.end() if bare else i + 1
        raw = text[i:end]
        words.append((None if raw.startswith(("$", "[")) else raw, raw))
        i = end
    return words, i


def _method(text: str, i: int, found: list[Found], notes: list[str]) -> None:
    """``[Environment]::SetEnvironmentVariable(name, value[, target])``."""
    words, _ = _arguments(text, i)
    parts: list[list[tuple[object, str]]] = [[]]
    for word in words:
        if word[1] == ",":
            parts.append([])
        else:
            parts[-1].append(word)
    if len(parts) < 2 or len(parts[0]) != 1 or not isinstance(parts[0][0][0], str):
        return
    name = parts[0][0][0]
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        return
    value = parts[1][0][0] if len(parts[1]) == 1 else None
    target = _TARGET.search(parts[2][-1][1]) if len(parts) > 2 and parts[2] else None
    shape = SHAPES["method"] + (f" ({target.group(1).title()})" if target else "")
    if value is _NULL or value == "":  # .NET: null or empty deletes the variable
        found.append(Found(name, None, "unset"))
    else:
        found.append(Found(name, value if isinstance(value, str) else None, shape))
    if target and target.group(1).lower() != "process":
        notes.append(PERSISTENT_NOTE.format(target=target.group(1).title(), name=name))


def _cmdlet(command: str, text: str, i: int, found: list[Found]) -> None:
    """``Set-Item``/``New-Item``/``Remove-Item`` on the ``Env:`` drive, named or positional."""
    command = {"si": "set-item", "ni": "new-item", "ri": "remove-item", "rm": "remove-item",
               "del": "remove-item", "erase": "remove-item"}.get(command, command)
    words, _ = _arguments(text, i)
    named: dict[str, tuple[object, str]] = {}
    positional: list[tuple[object, str]] = []
    k = 0
    while k < len(words):
        value, raw = words[k]
        option = re.fullmatch(r"-([A-Za-z]+)(?::(.*))?", raw)
        if option and option.group(1).lower() in ("force", "passthru", "whatif", "confirm"):
            k += 1
            continue
        if option:
            key = _parameter(option.group(1).lower())
            if option.group(2):  # -Value:INFO
                named[key] = (option.group(2), option.group(2))
            elif k + 1 < len(words):  # -Value INFO, -Value:"INFO"
                named[key] = words[k + 1]
                k += 1
        elif raw != ",":
            positional.append((value, raw))
        k += 1
    path = named.get("path") or (positional[0] if positional else None)
    if path is None or not isinstance(path[0], str):
        return
    drive = re.fullmatch(r"(?i)env:[\\/]?([A-Za-z_]\w*)?", path[0])
    if drive is None:
        return
    name = drive.group(1) or (named["name"][0] if "name" in named else None)
    if not isinstance(name, str):
        return
    if command == "remove-item":
        found.append(Found(name, None, "unset"))
        return
    value = named.get("value") or (positional[1] if command == "set-item" and
                                   len(positional) > 1 else None)
    if value is not None:
        text_value = value[0]
        found.append(Found(name, text_value if isinstance(text_value, str) else None,
                           SHAPES[command]))


def _parameter(option: str) -> str:
    """A cmdlet parameter as written (PowerShell takes any unambiguous prefix) -> its name."""
    for name, shortest in (("path", 3), ("literalpath", 1), ("value", 2), ("name", 2)):
        if len(option) >= shortest and name.startswith(option):
            return "path" if name == "literalpath" else name
    return option
