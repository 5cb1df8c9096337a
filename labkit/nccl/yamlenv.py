"""YAML ``env:`` blocks (Kubernetes, Compose, CI, Helm, Ray), read line by line.

A pasted block is usually a fragment (a pod spec's container, a Compose service, often inside
Markdown next to shell lines), which a YAML loader rejects or reads without line numbers, so
``EnvBlock`` follows indentation instead. It reads the shapes people paste:

    env:                         environment:              env:
      - name: NCCL_DEBUG           NCCL_DEBUG: INFO          - NCCL_DEBUG=INFO
        value: "INFO"              NCCL_IB_HCA:              - {name: NCCL_ALGO, value: Ring}
      - name: NODE_IP                                      env: {NCCL_DEBUG: INFO}
        valueFrom: {...}

``valueFrom`` and a Compose key without value pass a value from elsewhere: named, value not
given. A Kubernetes item without ``value`` sets the empty string, as the API does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from labkit.nccl.commands import ASSIGNMENT, ENV_NAME, NAME, Found, split_list

_ENV_KEYS = ("env", "environment", "env_vars", "envVars", "envs", "extraEnv", "extraEnvVars",
             "containerEnv", "variables")
KEY_LINE = re.compile(r"(\s*)(-\s+)?([\"']?)(" + "|".join(_ENV_KEYS) + r")\3\s*:\s*(.*?)\s*")
# A Kubernetes env item pasted on its own; env-style (upper case) names only, since a container
# item (``- name: trainer``) has the same shape and Kubernetes requires those in lower case.
ITEM_LINE = re.compile(r"(\s*)-\s+name\s*:\s*([\"']?)[A-Z_][A-Z0-9_]*\2\s*(?:#.*)?")
_FIELD = re.compile(r"([\"']?)([A-Za-z_][A-Za-z0-9_]*)\1\s*:(?:\s+(.*)|\s*)")
SHAPE = "yaml env"


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


def flow_pairs(text: str) -> list[tuple[str, str | None]] | None:
    """``{A: 1, B: "x"}`` as pairs; ``None`` when it is not a one-line flow mapping."""
    text = text.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    pairs = []
    for part in split_list(text[1:-1]):
        match = _FIELD.fullmatch(part.strip())
        if match:
            pairs.append((match.group(2), yaml_scalar(match.group(3) or "")))
    return pairs


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

    @classmethod
    def start(cls, line: str, number: int) -> EnvBlock | None:
        """The block that ``line`` opens (``env:``, ``env: {...}``, ``- name: X``), if any."""
        key = KEY_LINE.fullmatch(line)
        if key:
            indent = len(key.group(1)) + len(key.group(2) or "")
            rest = key.group(5)
            block = cls(indent)
            if not rest or rest.startswith("#"):
                return block
            if rest.startswith("[") and rest.endswith("]"):
                for part in split_list(rest[1:-1]):
                    block._list_string(part, number, line.strip())
                return block
            pairs = flow_pairs(rest)
            if pairs is None:
                return None  # environment: production, env_vars: |, ...
            for name, value in pairs:
                block._add(number, name, value, line.strip())
            return block
        item = ITEM_LINE.fullmatch(line)
        if item:
            block = cls(len(item.group(1)))
            block.feed(line, number)
            return block
        return None

    def feed(self, line: str, number: int) -> bool:
        """Read ``line`` if it belongs to this block; ``False`` (and the block is done) if not."""
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            return True
        indent = len(line) - len(line.lstrip(" "))
        dash = re.match(r"-(?:\s+|$)", stripped)
        if indent < self.key_indent or (indent == self.key_indent and not dash):
            self.close()
            return False
        if dash and (self._dash is None or indent == self._dash):
            self._dash = indent
            self.close()
            rest = stripped[dash.end():]
            pairs = flow_pairs(rest)
            if pairs is not None:
                self._item = {"line": number, "raw": stripped, **dict(pairs)}
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
            if match:
                rest = (match.group(3) or "").strip()
                self._add(number, match.group(2), yaml_scalar(rest), stripped,
                          named=not rest or rest.startswith("#"))
            else:
                self.unparsed.append(number)
        return True

    def close(self) -> None:
        """Record the open Kubernetes item, if any."""
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
            self._item[match.group(2)] = yaml_scalar(match.group(3) or "")
            if match.group(2) == "value":
                self._item["value_line"] = number

    def _list_string(self, text: str, number: int, raw: str) -> None:
        """A Compose list entry: ``NAME=VALUE`` sets, ``NAME`` passes the shell's value."""
        value = yaml_scalar(text)
        match = ASSIGNMENT.fullmatch(value or "")
        if match:
            self.found.append((number, Found(match.group(1), match.group(2), SHAPE), raw))
        elif value and ENV_NAME.fullmatch(value):
            self.found.append((number, Found(value, None, SHAPE), raw))
        else:
            self.unparsed.append(number)

    def _add(self, number: int, name: str, value: str | None, raw: str,
             named: bool = False) -> None:
        """A ``NAME: value`` entry; ``named``: no value written (Compose passes the shell's)."""
        if not NAME.fullmatch(name) or value is None:
            self.unparsed.append(number)
        else:
            self.found.append((number, Found(name, None if named else value, SHAPE), raw))
