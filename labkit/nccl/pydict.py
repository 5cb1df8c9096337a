"""Python dict and JSON object literals that hold environment settings, read without running them.

    env_vars = {                              "env": {
        "NCCL_DEBUG": "INFO",                     "NCCL_DEBUG": "INFO",
        "OUTPUT_PATH": os.getcwd(),  # named      "NCCL_IB_HCA": "mlx5"
        "NCCL_TUNER_PLUGIN": "",              }
    }

``read_dict(lines, i)`` reads the literal that opens on line ``i`` (``NAME = {``, ``env={``,
``"env": {``, ``os.environ.update({``), to its closing brace, nested dicts and lists included.
A string-literal key in env style (``NCCL_X``) with a string literal (or adjacent literals, or a
number) as value is set; with any other value (a call, a name, an f-string with fields) it is
named, value not given. A literal counts only if it looks like an environment: its text before
the brace says ``env``, or a key carries a watched prefix.

``code_pairs(line)`` reads one-line Python and JSON settings: ``os.environ["A"] = "1"`` (a
literal is set, anything else named), ``os.environ.setdefault("A", "1")``, ``os.putenv``, and
``"NCCL_X": "1"`` pairs.

Keyword arguments of a call written one per line (``with patch_env(`` / ``NCCL_X='1',`` /
``RANK=str(rank),``) are read by ``read_keyword``: a literal is set, an expression is named.
"""

from __future__ import annotations

import ast
import json
import re
from typing import NamedTuple

from labkit.nccl.commands import ENV_NAME, Found

SHAPE = "dict literal"
# A brace that opens a literal (after = ( : , [ or at the start, then a key or the line's end),
# not ${VAR}, a shell function's body or a brace group.
OPENS = re.compile(r"""(?:^|[=(:,\[])\s*\{(?=\s*(?:$|["'#}]|\*\*))""")
_MAX_LINES = 2000
_STRING = re.compile(r"""(?i:[rbuf]{0,2})('''|\"\"\"|'|")""")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_BLANKS = re.compile(r"[ \t\r\\]+")
_EXPR = re.compile(r"[^\s,:{}\[\]()'\"#]+")
_CLOSE = {"{": "}", "[": "]", "(": ")"}
_PY_TARGET = r"""(?:os\.environ|\b[a-z_]*env[a-z_]*)\[\s*(["'])(\w+)\1\s*\]\s*=(?!=)"""
_PY_SET = re.compile(_PY_TARGET + r"""\s*(["'])(.*?)\3(?=\s*(?:[#;)]|$))""")  # a literal
_PY_SET_ANY = re.compile(_PY_TARGET)  # os.environ["A"] = "x," + rest: computed, only named
_PY_DEFAULT = re.compile(
    r"""os\.(?:environ\.setdefault|putenv)\(\s*(["'])(\w+)\1\s*,\s*(["'])(.*?)\3\s*\)""")
_JSON_PAIR = re.compile(
    r"""(["'])([A-Z][A-Z0-9]*_[A-Z0-9_]*)\1\s*:\s*("(?:[^"\\]|\\.)*"|'[^']*'|-?[\w.]+)""")


class _Token(NamedTuple):
    kind: str  # "str" (a literal), "expr" (an f-string with fields, a name, a call...), "op"
    text: str  # the literal's value, or the text / operator
    line: int


def read_dict(text: str, start: int, number: int, watched: re.Pattern[str]
              ) -> tuple[list[tuple[int, Found, str]], int] | None:
    """The settings in the literal opening on the line at offset ``start`` of ``text`` (line
    ``number``), each with its line number and line (none when it does not hold an
    environment), and the offset after the literal; ``None`` when no literal opens there."""
    end_of_line = text.find("\n", start)
    line = text[start:len(text) if end_of_line < 0 else end_of_line]
    opening = OPENS.search(line)
    before = line[:opening.start()] if opening else ""
    if opening is None or before.count("'") % 2 or before.count('"') % 2:
        return None  # no literal, or its brace is inside a quoted shell argument
    tokens, end = _tokens(text, start + opening.end() - 1, number)
    pairs: list[tuple[int, str, str | None]] = []
    _block(tokens, 1, "}", pairs)
    env_like = "env" in line[:opening.end()].lower() or any(watched.match(k) for _, k, _ in pairs)
    if not env_like:
        return [], end
    lines = text[start:end].split("\n")
    return [(n, Found(k, v, SHAPE), lines[n - number].strip()) for n, k, v in pairs], end


_KEYWORD = re.compile(r"\s*([A-Za-z_]\w*)\s*=\s*(.+?)\s*[,)]\)*:?\s*")
KEYWORD_SHAPE = "python keyword argument"


def code_pairs(line: str) -> list[Found]:
    """``os.environ["A"] = "1"``, ``os.environ.setdefault(...)``, ``"NCCL_X": "1"`` pairs."""
    found = [Found(m.group(2), m.group(4), "python os.environ")
             for pattern in (_PY_SET, _PY_DEFAULT) for m in pattern.finditer(line)]
    if found:
        return found
    found = [Found(m.group(2), None, "python os.environ") for m in _PY_SET_ANY.finditer(line)]
    if found:
        return found
    for match in _JSON_PAIR.finditer(line):
        value = match.group(3)
        if value.startswith('"'):
            try:
                value = json.loads(value)
            except ValueError:
                value = value[1:-1]
        elif value.startswith("'"):
            value = value[1:-1]
        found.append(Found(match.group(2), value, "json"))
    return found


def read_keyword(line: str, before: str) -> Found | None:
    """``NAME=<expression>,`` on a line of its own inside a call (``before``, the line above,
    ends with ``(`` or ``,``): the literal's value as a setting, or, for any other expression
    (``str(rank)``, a name), the name with no value; None for any other line."""
    match = _KEYWORD.fullmatch(line)
    if match is None or not before.rstrip().endswith(("(", ",")) or \
            not ENV_NAME.fullmatch(match.group(1)):
        return None
    expression = match.group(2)
    try:
        value = ast.literal_eval(expression)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        value = None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return Found(match.group(1), None, KEYWORD_SHAPE)
    return Found(match.group(1), str(value), KEYWORD_SHAPE)


def _tokens(text: str, i: int, line: int) -> tuple[list[_Token], int]:
    """Tokens from the ``{`` at ``i`` to the brace that closes it (or the end of ``text``), and
    the index after them."""
    tokens: list[_Token] = []
    depth, last = 0, line + _MAX_LINES
    while i < len(text) and line < last:
        char = text[i]
        if char == "\n":
            line += 1
            i += 1
        elif char in " \t\r\\":
            i = _BLANKS.match(text, i).end()
        elif char == "#" or text.startswith("//", i):
            newline = text.find("\n", i)
            i = len(text) if newline < 0 else newline
        elif char in "{[(":
            depth += 1
            tokens.append(_Token("op", char, line))
            i += 1
        elif char in "}])":
            depth -= 1
            tokens.append(_Token("op", char, line))
            i += 1
            if depth == 0:
                break
        elif char in ",:":
            tokens.append(_Token("op", char, line))
            i += 1
        elif string := _STRING.match(text, i):
            after, token = _string(text, i, string, line)
            line += text.count("\n", i, after)
            tokens.append(token)
            i = after
        else:
            match = _EXPR.match(text, i)
            piece = match.group() if match else char
            tokens.append(_Token("expr", piece, line))
            i += len(piece)
    return tokens, i


def _string(text: str, i: int, string: re.Match[str], line: int) -> tuple[int, _Token]:
    """A string literal at ``i``: its value, or an "expr" for an f-string with fields."""
    quote = string.group(1)
    j = string.end()
    while j < len(text):
        if text[j] == "\\":
            j += 2
        elif text.startswith(quote, j):
            break
        elif text[j] == "\n" and len(quote) == 1:
            return j, _Token("expr", text[i:j], line)  # unterminated on its line
        else:
            j += 1
    literal = text[i:j + len(quote)]
    prefix = text[i:string.start(1)].lower()
    if not prefix and len(quote) == 1 and "\\" not in literal:
        return j + 1, _Token("str", literal[1:-1], line)  # the common case, without ast
    if "f" in prefix and re.search(r"(?<!\{)\{(?!\{)", literal):
        return j + len(quote), _Token("expr", literal, line)
    try:  # an f-string without fields is a plain literal
        value = ast.literal_eval(prefix.replace("f", "") + text[string.start(1):j + len(quote)])
    except (ValueError, SyntaxError):
        return j + len(quote), _Token("expr", literal, line)
    if isinstance(value, bytes):
        return j + len(quote), _Token("expr", literal, line)
    return j + len(quote), _Token("str", value, line)


def _block(tokens: list[_Token], i: int, closer: str, pairs: list[tuple[int, str, str | None]]
           ) -> int:
    """Read the entries of the bracket opened before ``tokens[i]`` (a dict when ``closer`` is
    ``}``), recording ``KEY: value`` pairs; the index after its closing bracket."""
    while i < len(tokens):
        if tokens[i].kind == "op" and tokens[i].text in "}])":
            return i + 1
        i, key = _element(tokens, i, pairs)
        if closer == "}" and i < len(tokens) and tokens[i].text == ":" and \
                tokens[i].kind == "op":
            i, value = _element(tokens, i + 1, pairs)
            _pair(key, value, pairs)
        if i < len(tokens) and tokens[i].kind == "op" and tokens[i].text in ",:":
            i += 1
    return i


def _element(tokens: list[_Token], i: int, pairs: list[tuple[int, str, str | None]]
             ) -> tuple[int, list[_Token]]:
    """The tokens of one key or value up to ``,``/``:``/a closing bracket; nested brackets are
    read (their pairs recorded) and stand as one "expr"."""
    found: list[_Token] = []
    while i < len(tokens):
        token = tokens[i]
        if token.kind == "op" and token.text in ",:}])":
            return i, found
        if token.kind == "op" and token.text in _CLOSE:
            i = _block(tokens, i + 1, _CLOSE[token.text], pairs)
            found.append(_Token("expr", token.text, token.line))
            continue
        found.append(token)
        i += 1
    return i, found


def _pair(key: list[_Token], value: list[_Token], pairs: list[tuple[int, str, str | None]]
          ) -> None:
    if len(key) != 1 or key[0].kind != "str" or not ENV_NAME.fullmatch(key[0].text):
        return
    if value and all(t.kind == "str" for t in value):
        text: str | None = "".join(t.text for t in value)
    elif len(value) == 1 and _NUMBER.fullmatch(value[0].text):
        text = value[0].text
    else:
        text = None  # a call, a name, an f-string with fields: computed when the code runs
    pairs.append((key[0].line, key[0].text, text))
