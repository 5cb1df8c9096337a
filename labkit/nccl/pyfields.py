"""Python annotated assignments that name environment variables: typed class fields and variables.

    @dataclass
    class EnvironmentArgs:                         # every field named like a variable: settings
        NCCL_DEBUG: str = "INFO"
        NCCL_IB_TIMEOUT: str = field(default="22")
        NCCL_ALGO: Annotated[str, "doc"] = Field(default="Ring", description="...")
        NCCL_SOCKET_IFNAME: str | None = None     # named, value not given
        NCCL_IB_HCA: str = os.environ.get("HCA")  # named, value not given

    NCCL_DEBUG: str = "INFO"                       # a typed variable: read loosely

``NAME: <annotation> = <default>`` is Python, not a YAML ``NAME: value`` line whose value would be
``str = "INFO"``: the annotation is a type and the default follows ``=``. The default is the value
when it is a literal (a string, adjacent strings, a number), or the ``default=`` of ``field(...)``
/ ``Field(...)`` (pydantic's ``Field("x")`` too); ``None``, ``True``/``False`` (which string a
program writes for them is its own choice), ``default_factory`` and any other expression (a name,
a call, an f-string with fields) only name the variable.

When is such a field a setting? A class whose every annotated field is named like an environment
variable (upper case: ``NCCL_DEBUG``, ``OMP_NUM_THREADS``) is an environment written as code: such
classes exist to be exported (a dataclass copied into ``os.environ`` with ``asdict``, pydantic
settings named after the variables they stand for), so their literal defaults are read as settings
(shape "python field") and checked like any other value; a field there without a default only
names its variable. A typed variable outside such a class (at module level, or in a class that
also has lower-case fields) is a Python name that may or may not reach the environment:
``labkit.nccl.loose`` reads its literal default at most as a warning, and the structured reader
leaves it alone rather than read it as YAML.
"""

from __future__ import annotations

import ast
import re

from labkit.nccl.commands import ENV_NAME, Found

SHAPE = "python field"
_START = re.compile(r"[ \t]*[A-Za-z_]\w*[ \t]*:[ \t]*[A-Za-z_]")  # NAME: annotation ...
_CLASS = re.compile(r"[ \t]*class[ \t]+\w+[^:]*:[ \t]*(?:#.*)?")
_FIELD_CALLS = {"field", "Field", "attrib", "ib"}  # dataclasses, pydantic, attrs


def has_class(text: str) -> bool:
    """Whether ``text`` has a Python class header anywhere (a class body is possible)."""
    return re.search(r"^[ \t]*class[ \t]+\w", text, re.MULTILINE) is not None


def annotated(line: str, bare: bool = False) -> tuple[str, str | None, bool] | None:
    """``(name, value, has_default)`` when ``line`` is a Python annotated assignment to an
    env-style name (``NCCL_X: str = "1"``, or with ``bare`` also ``NCCL_X: str``, with
    ``has_default`` False); ``value`` is the literal default as a string, None when the default
    is no literal. None when ``line`` is anything else."""
    if ("=" not in line and not bare) or not _START.match(line):
        return None
    try:
        tree = ast.parse(line.strip())
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    node = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name) or \
            not ENV_NAME.fullmatch(node.target.id):
        return None
    if node.value is None:
        return node.target.id, None, False
    return node.target.id, _default(node.value), True


def _default(node: ast.expr) -> str | None:
    """The string a literal default gives the variable; None for anything else."""
    if isinstance(node, ast.Call):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else \
            node.func.id if isinstance(node.func, ast.Name) else ""
        if name not in _FIELD_CALLS:
            return None
        given = [k.value for k in node.keywords if k.arg == "default"]
        if not given and name == "Field" and node.args:  # pydantic: Field("x", ...)
            given = [node.args[0]]
        return _default(given[0]) if given else None
    if isinstance(node, ast.Constant) and not isinstance(node.value, bool) and \
            isinstance(node.value, str | int | float):
        return str(node.value)
    return None


class Fields:
    """The annotated lines of one text, read as settings where their class makes them so."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.classes = has_class("\n".join(lines))
        self._env_class: dict[int, bool] = {}  # class header line -> every field env-named
        self._headers: dict[int, int | None] = {}  # line -> its class header line

    def read(self, i: int) -> tuple[Found | None, bool] | None:
        """For line ``i``: None when it is no Python annotated assignment of an env-style name
        (a field without a default counts only inside a class); else ``(found, setting)``:
        ``found`` the variable read (None for a typed variable outside an environment class),
        ``setting`` whether the line is a field of such a class."""
        line = self.lines[i]
        read = annotated(line, bare=self.classes)
        if read is None:
            return None
        name, value, has_default = read
        header = self._header(i) if self.classes and line[:1] in " \t" else None
        setting = header is not None and self._all_env(header)
        if not setting:
            return (None, False) if has_default else None  # a YAML "NAME: value" line
        return Found(name, value, SHAPE), True

    def _header(self, i: int) -> int | None:
        """The line of the class whose body holds line ``i`` directly, if any (remembered for
        the lines after it at the same indent, so a long body is walked once)."""
        indent = len(self.lines[i]) - len(self.lines[i].lstrip())
        found: int | None = None
        for j in range(i - 1, -1, -1):
            text = self.lines[j]
            if not text.strip() or text.lstrip().startswith(("#", "@")):
                continue
            own = len(text) - len(text.lstrip())
            if own == indent and j in self._headers:
                found = self._headers[j]
                break
            if own < indent:
                found = j if _CLASS.fullmatch(text) else None
                break
        self._headers[i] = found
        return found

    def _all_env(self, header: int) -> bool:
        """Whether every annotated field of the class at ``header`` has an env-style name."""
        if header not in self._env_class:
            own = len(self.lines[header]) - len(self.lines[header].lstrip())
            body: int | None = None
            names: list[str] = []
            for text in self.lines[header + 1:]:
                if not text.strip() or text.lstrip().startswith("#"):
                    continue
                indent = len(text) - len(text.lstrip())
                if indent <= own:
                    break
                body = indent if body is None else body
                target = re.match(r"\s*([A-Za-z_]\w*)\s*:(?!=)", text) if indent == body else None
                if target and not text.rstrip().endswith(":"):  # not "def f(x):" nor "if x:"
                    names.append(target.group(1))
            self._env_class[header] = bool(names) and all(ENV_NAME.fullmatch(n) for n in names)
        return self._env_class[header]
