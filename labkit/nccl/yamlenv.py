"""YAML ``env:`` blocks (Kubernetes, Compose, CI, Helm, Ray), read line by line.

A pasted block is usually a fragment (a pod spec's container, a Compose service, often inside
Markdown next to shell lines), which a YAML loader rejects or reads without line numbers, so
``EnvBlock`` follows indentation instead. It reads the shapes people paste:

    env:                         environment:              env:
      - name: NCCL_DEBUG           NCCL_DEBUG: INFO          - NCCL_DEBUG=INFO
        value: "INFO"              NCCL_IB_HCA:              - {name: NCCL_ALGO, value: Ring}
      - name: NODE_IP                                      env: {NCCL_DEBUG: INFO}
        valueFrom: {...}

The env key may be any of ``_ENV_KEYS`` (``env``, ``environment``, ``env_vars``, ``envVars``,
``environment_variables``, ``extraEnv`` ...), at any depth (``container: env:``, ``runtime_env:
env_vars:``). Inside it a ``set:`` (or ``variables:``, ``vars:``, another env key) holds the map
itself, ``unset:`` lists names to remove, and ``prepend_path:`` / ``append_path:`` /
``remove_path:`` edit a value the text does not show (named, value not given), as Ramble's and
Spack's ``env_vars`` do; the keys next to such a nested map (``force_pull_image:``, ``image:``)
are the job's own settings, not variables. A one-line flow mapping that holds an env key
(``runtime_env: {env_vars: {A: 1}}``, ``container: {env: [{name: A, value: "1"}]}``) is read with
PyYAML's BaseLoader (``nested_flow``). A YAML file written by a here-document (``cat <<EOF >
job.yaml``) is read as its own text (``labkit.nccl.inner``), so its maps are these too.

``valueFrom`` and a mapping key whose value is YAML null (nothing, ``null``, ``~``) pass a value
from elsewhere or none: named, value not given (Compose takes it from the shell, or leaves the
variable unset; NeMo-Framework-Launcher's ``get_env_vars`` drops ``None`` values). A Kubernetes
item without ``value`` (or with a null one) sets the empty string, as the API does. A plain or
quoted value may continue on more-indented lines (``KEY:`` then the value below it); YAML folds
the lines into one, joined by spaces.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from labkit.nccl.commands import ASSIGNMENT, ENV_NAME, NAME, Found, split_list

_ENV_KEYS = ("env", "environment", "env_vars", "envVars", "envs", "extraEnv", "extraEnvVars",
             "containerEnv", "variables", "environment_variables", "environmentVariables",
             "env_variables", "extra_env", "extra_env_vars")
# Keys inside an env map that hold the map itself (Ramble's and Spack's ``env_vars: set:``, a
# job spec's ``environment: variables:``), and the one that lists names to remove (``unset:``).
_NESTED = frozenset({"set", "vars", *_ENV_KEYS})
_UNSET = "unset"
_EDITS = frozenset({"prepend_path", "append_path", "remove_path"})  # Spack: change a path list
KEY_LINE = re.compile(r"(\s*)(-\s+)?([\"']?)(" + "|".join(_ENV_KEYS) + r")\3\s*:\s*(.*?)\s*")
# Any key whose one-line flow value holds an env key's map or list: ``runtime_env: {env_vars:
# {A: 1}}``, ``container: {env: [{name: A, value: "1"}]}``.
_FLOW_LINE = re.compile(r"\s*(?:-\s+)?[A-Za-z_][\w.-]*\s*:\s*(\{.*(?:" + "|".join(_NESTED)
                        + r")[\"']?\s*:\s*[\[{].*\})\s*(?:#.*)?")
# A Kubernetes env item pasted on its own; env-style (upper case) names only, since a container
# item (``- name: trainer``) has the same shape and Kubernetes requires those in lower case.
ITEM_LINE = re.compile(r"(\s*)-\s+name\s*:\s*([\"']?)[A-Z_][A-Z0-9_]*\2\s*(?:#.*)?")
_FIELD = re.compile(r"([\"']?)([A-Za-z_][A-Za-z0-9_]*)\1\s*:(?:\s+(.*)|\s*)")
_NULL = re.compile(r"\s*(?:(?:null|Null|NULL|~)(?:\s+#.*)?|#.*)?")  # YAML 1.2 core schema null
SHAPE = "yaml env"
_MAX_PARTS = 20  # lines one value may span


def is_null(text: str) -> bool:
    """Whether a one-line YAML value is null: empty, ``null``/``Null``/``NULL`` or ``~`` (a
    trailing comment allowed); a quoted ``"null"`` is a string."""
    return _NULL.fullmatch(text) is not None


def yaml_scalar(text: str) -> str | None:
    """A one-line YAML scalar's value (quotes removed, trailing comment dropped); ``None`` for a
    block scalar, alias, tag or anything else this does not read."""
    text = text.strip()
    if not text or text.startswith("#"):
        return ""
    if text[0] == '"':
        match = re.match(r'"((?:[^"\\]|\\.)*)"\s*(?:#.*)?', text)
        if not match or match.end() != len(text):
            return None
        try:
            return json.loads(f'"{match.group(1)}"')  # YAML's common escapes are JSON's
        except ValueError:
            return match.group(1)
    if text[0] == "'":
        match = re.match(r"'((?:[^']|'')*)'\s*(?:#.*)?", text)
        return match.group(1).replace("''", "'") if match and match.end() == len(text) else None
    if text[0] in "|>&*!%@`[{":
        return None
    return re.split(r"\s+#", text, maxsplit=1)[0].rstrip()


def flow_pairs(text: str) -> list[tuple[str, str | None, bool]] | None:
    """``{A: 1, B: "x"}`` as (name, value, null) triples; ``None`` when it is not a one-line flow
    mapping."""
    text = text.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    pairs = []
    for part in split_list(text[1:-1]):
        match = _FIELD.fullmatch(part.strip())
        if match:
            raw = match.group(3) or ""
            pairs.append((match.group(2), None if is_null(raw) else yaml_scalar(raw),
                          is_null(raw)))
    return pairs


def nested_flow(text: str) -> list[Found] | None:
    """The variables an env key sets inside a one-line flow mapping (``{env_vars: {A: 1}}``,
    ``{env: [{name: A, value: "1"}]}``, ``{environment: {variables: {A: 1}}}``), read with
    PyYAML's BaseLoader, which keeps every scalar a string as written; None when it is no flow
    mapping."""
    import yaml  # only for these lines

    try:
        data = yaml.load(text, Loader=yaml.BaseLoader)  # builds no objects, only strings
    except yaml.YAMLError:
        return None
    found: list[Found] = []
    _walk(data, found, False)
    return found if isinstance(data, dict) else None


def _walk(data: object, found: list[Found], env: bool, unset: bool = False) -> None:
    """Collect what ``data`` sets: inside an env key (``env``), a map's keys are variables and a
    list's items are Kubernetes ``{name, value}`` items or ``NAME=VALUE`` strings."""
    if isinstance(data, dict) and env and not unset and isinstance(data.get("name"), str):
        value = data.get("value", "")  # a Kubernetes item; valueFrom: named, value not given
        value = "" if isinstance(value, str) and is_null(value) else value  # the API's default
        found.append(Found(data["name"], value if isinstance(value, str) and
                           "valueFrom" not in data else None, SHAPE))
    elif isinstance(data, dict):
        for key, value in data.items():
            if env and key == _UNSET:
                _walk(value, found, True, True)
            elif (key in _NESTED if env else key in _ENV_KEYS) and isinstance(value, dict | list):
                _walk(value, found, True, unset)
            elif env and NAME.fullmatch(key) and isinstance(value, str):
                named = unset or is_null(value)
                found.append(Found(key, None, "unset" if unset else SHAPE) if named
                             else Found(key, value, SHAPE))
            elif not env:
                _walk(value, found, False)
    elif isinstance(data, list):
        for item in data:
            if env and isinstance(item, str):
                match = ASSIGNMENT.fullmatch(item)
                found.append(Found(item, None, "unset") if unset else
                             Found(match.group(1), match.group(2), SHAPE) if match else
                             Found(item, None, SHAPE))
            else:
                _walk(item, found, env, unset)


@dataclass
class _Open:
    """A value that may continue on the next, more-indented lines."""

    line: int
    name: str  # the variable (a mapping key), or "value" (a Kubernetes item's field)
    raw: str
    parts: list[str]
    quote: str = ""  # the open quote of a quoted value, until it closes


@dataclass
class EnvBlock:
    """The lines under one ``env:`` key (or from one pasted ``- name:`` item on): ``feed`` each
    following line; it says whether the line belonged to the block, and ``found`` and
    ``unparsed`` collect what it read and what it could not, each with its line number."""

    key_indent: int
    found: list[tuple[int, Found, str]] = field(default_factory=list)
    unparsed: list[int] = field(default_factory=list)
    _dash: int | None = None  # column of this block's "- " items
    _item_column: int | None = None  # column of the open item's keys
    _map_column: int | None = None  # column of the keys of a NAME: value block
    _item: dict[str, str | int | None] = field(default_factory=dict)
    _open: _Open | None = None
    unset: bool = False  # an ``unset:`` map or list: the names it holds are removed
    edits: bool = False  # ``prepend_path:`` and the like: named, the value is not all here
    _child: EnvBlock | None = None  # an open nested ``set:`` / ``unset:`` block
    _holder: bool = False  # the map holds nested env maps: its plain keys are no variables

    def _inline(self, rest: str, number: int, raw: str) -> bool:
        """Read a one-line value of the key that opens the block (``[A=1, B]``, ``{A: 1}``);
        False when it is neither."""
        if rest.startswith("[") and rest.endswith("]"):
            for part in split_list(rest[1:-1]):
                self._list_string(part, number, raw)
            return True
        pairs = flow_pairs(rest)
        for name, value, null in pairs or ():
            self._add(number, name, value, raw, named=null)
        return pairs is not None

    def _nest(self, key: str, rest: str, indent: int, number: int, raw: str) -> bool:
        """A ``set:`` / ``unset:`` (or another env key) inside the map: its own block, whose
        finds go to this one's; False when its value is a plain scalar (a variable so named)."""
        child = EnvBlock(indent, self.found, self.unparsed, unset=key == _UNSET,
                         edits=key in _EDITS)
        if is_null(rest):
            self._child = child
            return True
        return child._inline(rest, number, raw)

    @classmethod
    def start(cls, line: str, number: int) -> EnvBlock | None:
        """The block that ``line`` opens (``env:``, ``env: {...}``, ``- name: X``), if any."""
        flow = _FLOW_LINE.fullmatch(line) if "{" in line else None
        found = nested_flow(flow.group(1)) if flow else None
        if found:  # an env map inside a flow mapping
            block = cls(len(line) - len(line.lstrip()))
            block.found += [(number, f, line.strip()) for f in found]
            return block
        key = KEY_LINE.fullmatch(line)
        if key:
            indent = len(key.group(1)) + len(key.group(2) or "")
            rest = key.group(5)
            block = cls(indent)
            if not rest or rest.startswith("#") or block._inline(rest, number, line.strip()):
                return block
            return None  # environment: production, env_vars: |, ...
        item = ITEM_LINE.fullmatch(line)
        if item:
            block = cls(len(item.group(1)))
            block.feed(line, number)
            return block
        return None

    def feed(self, line: str, number: int) -> bool:
        """Read ``line`` if it belongs to this block; ``False`` (and the block is done) if not."""
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if not stripped or (stripped.startswith("#") and not (self._open and self._open.quote)):
            return True
        if self._child is not None:
            if self._child.feed(line, number):
                return True
            self._child = None
        dash = re.match(r"-(?:\s+|$)", stripped)
        if indent < self.key_indent or (indent == self.key_indent and not dash):
            self.close()
            return False
        column = self._item_column if self._dash is not None else self._map_column
        if self._open is not None and column is not None and indent > column:
            self._continue(stripped, number)
            return True
        self._finish()
        if dash and (self._dash is None or indent == self._dash):
            self._dash = indent
            self.close()
            rest = stripped[dash.end():]
            pairs = flow_pairs(rest)
            if pairs is not None:
                self._item = {"line": number, "raw": stripped,
                              **{k: "" if null else v for k, v, null in pairs}}
                self.close()
            elif _FIELD.fullmatch(rest):
                self._item = {"line": number, "raw": stripped}
                self._item_column = indent + dash.end()
                self._field(rest, number)
            else:
                self._list_string(rest, number, stripped)
        elif self._dash is not None:
            if indent == self._item_column and self._item:
                self._field(stripped, number)
        elif self._map_column is None or indent == self._map_column:
            self._map_column = indent
            match = _FIELD.fullmatch(stripped)
            key, rest = (match.group(2), (match.group(3) or "").strip()) if match else ("", "")
            if key in _NESTED or key == _UNSET or key in _EDITS:
                if not self._nest(key, rest, indent, number, stripped):
                    self._value(number, key, rest, stripped)
                else:
                    self._holder = True
            elif self._holder:
                pass  # next to a nested map: the job's other settings (image: ...), not variables
            elif match:
                self._value(number, key, rest, stripped)
            else:
                self.unparsed.append(number)
        return True

    def close(self) -> None:
        """Record the open value and the open Kubernetes item, if any."""
        if self._child is not None:
            self._child.close()
            self._child = None
        self._finish()
        item, self._item = self._item, {}
        name = item.get("name")
        if not isinstance(name, str) or not name:
            return
        line = int(item.get("line") or 0)
        if "valueFrom" in item:
            self.found.append((line, Found(name, None, SHAPE), str(item["raw"])))
        elif item.get("value", "") is None:
            self.unparsed.append(int(item.get("value_line") or line))
        else:
            self.found.append((line, Found(name, str(item.get("value", "")), SHAPE),
                               str(item["raw"])))

    def _field(self, text: str, number: int) -> None:
        match = _FIELD.fullmatch(text)
        if match and match.group(2) in ("name", "value", "valueFrom"):
            key, raw = match.group(2), (match.group(3) or "").strip()
            if key == "value":
                self._item["value_line"] = number
                self._value(number, "value", raw, text)
            else:
                self._item[key] = yaml_scalar(raw)

    def _value(self, number: int, name: str, text: str, raw: str) -> None:
        """A value that starts on this line: complete, or open for the lines below it."""
        if is_null(text):
            self._open = _Open(number, name, raw, [])
        elif text[0] in "\"'" and yaml_scalar(text) is None:
            self._open = _Open(number, name, raw, [text], text[0])
        elif text[0] not in "|>&*!%@`[{\"'" and not re.search(r"\s#", text):
            self._open = _Open(number, name, raw, [text])
        else:
            self._set(number, name, yaml_scalar(text), raw)

    def _continue(self, text: str, number: int) -> None:
        """A more-indented line under an open value: more of it, or (a key, a list item under
        a key) a structure, which is not a variable's value."""
        value = self._open
        assert value is not None
        if not value.parts and text[0] in "\"'":
            value.quote = text[0]  # KEY: then its quoted value on the next line
        if not value.quote and (_FIELD.fullmatch(text) or re.match(r"-(?:\s|$)", text)):
            self._open = None
            self.unparsed.append(value.line)
            return
        value.parts.append(text if value.quote else re.split(r"\s+#", text, maxsplit=1)[0])
        if len(value.parts) > _MAX_PARTS:
            self._open = None
            self.unparsed.append(value.line)
        elif value.quote and yaml_scalar(" ".join(value.parts)) is not None:
            self._finish()
        elif not value.quote and re.search(r"\s#", text):
            self._finish()  # a comment ends a plain value

    def _finish(self) -> None:
        value, self._open = self._open, None
        if value is None:
            return
        if not value.parts:  # null: named (a mapping key) or "" (a Kubernetes value)
            self._set(value.line, value.name, None, value.raw, null=True)
            return
        text = " ".join(value.parts)
        self._set(value.line, value.name, yaml_scalar(text) if value.quote else text.rstrip(),
                  value.raw)

    def _set(self, number: int, name: str, value: str | None, raw: str,
             null: bool = False) -> None:
        if name == "value" and self._dash is not None:
            self._item["value"] = "" if null else value
        else:
            self._add(number, name, value, raw, named=null)

    def _list_string(self, text: str, number: int, raw: str) -> None:
        """A Compose list entry: ``NAME=VALUE`` sets, ``NAME`` passes the shell's value."""
        value = yaml_scalar(text)
        match = ASSIGNMENT.fullmatch(value or "")
        if self.unset and value and NAME.fullmatch(value):
            self.found.append((number, Found(value, None, "unset"), raw))
        elif match:
            self.found.append((number, Found(match.group(1), match.group(2), SHAPE), raw))
        elif value and ENV_NAME.fullmatch(value):
            self.found.append((number, Found(value, None, SHAPE), raw))
        else:
            self.unparsed.append(number)

    def _add(self, number: int, name: str, value: str | None, raw: str,
             named: bool = False) -> None:
        """A ``NAME: value`` entry; ``named``: YAML null (Compose passes the shell's value)."""
        if not NAME.fullmatch(name) or (value is None and not named):
            self.unparsed.append(number)
        elif self.unset or self.edits:
            self.found.append((number, Found(name, None, "unset" if self.unset else SHAPE), raw))
        else:
            self.found.append((number, Found(name, None if named else value, SHAPE), raw))
