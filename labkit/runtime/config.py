"""A command's config is one dataclass: its defaults are the command's defaults, the comment after
each field is the flag's ``--help``, and the same object travels to the ranks as JSON.

    @dataclass
    class TrainConfig:
        agents: int = 2  # agents that step environments

    add_config_arguments(parser, TrainConfig)        # --agents AGENTS  agents that step ... (2)
    cfg = config_from_args(TrainConfig, args)         # TrainConfig(agents=args.agents, ...)
    same = from_json(TrainConfig, to_json(cfg))       # nested dataclasses included

A field's flag is ``--`` plus its name with dashes; ``flags={"timeout_s": "--timeout"}`` renames
one (the lab's vocabulary: ``--nnodes``, ``--nproc-per-node``, ``--timeout``), ``skip`` leaves
fields to the command, and a nested dataclass field (``hyper: Hyper``) contributes its own
fields' flags. Booleans get ``--x / --no-x``; ``int | None`` takes an int or stays None.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from labkit.errors import ParameterError

_COMMENT = re.compile(r"^    (\w+)\s*:[^#]*#\s*(.+?)\s*$")  # a field: one indent deep


def field_docs(cls: type) -> dict[str, str]:
    """The comment after each field of dataclass ``cls``, by field name (read from its source)."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    return {m.group(1): m.group(2) for line in source.splitlines() if (m := _COMMENT.match(line))}


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _scalar(hint: Any) -> type:
    """The type a flag parses for a field's type hint (``int | None``: ``int``)."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        return next(a for a in args if a is not type(None))
    return hint


def add_config_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type, *,
                         skip: Iterable[str] = (), flags: Mapping[str, str] | None = None,
                         choices: Mapping[str, Iterable[Any]] | None = None,
                         aliases: Mapping[str, Iterable[str]] | None = None,
                         defaults: Any = None) -> None:
    """One flag per field of dataclass ``cls`` (nested dataclasses: their fields' flags), with
    the field's default (or ``defaults``'s value, an instance) and its comment as help;
    ``aliases`` adds older spellings of a flag (``{"nodes": ["--nodes"]}``)."""
    skip, flags, choices = set(skip), dict(flags or {}), dict(choices or {})
    aliases = {name: list(extra) for name, extra in (aliases or {}).items()}
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        value = getattr(defaults, f.name) if defaults is not None else _default(f)
        kind = _scalar(hints[f.name])
        if dataclasses.is_dataclass(kind):
            add_config_arguments(parser, kind, skip=skip, flags=flags, choices=choices,
                                 aliases=aliases, defaults=value)
            continue
        flag = flags.get(f.name, "--" + f.name.replace("_", "-"))
        spellings = [flag, *aliases.get(f.name, ())]
        metavar = flag.lstrip("-").replace("-", "_").upper()
        text = docs.get(f.name, "")
        shown = f"(default {value})" if value not in (None, "") else ""
        help_text = f"{text} {shown}".strip() or None
        if kind is bool:
            parser.add_argument(*spellings, dest=f.name, action=argparse.BooleanOptionalAction,
                                default=value, help=help_text)
        else:
            listed = list(choices[f.name]) if f.name in choices else None
            parser.add_argument(*spellings, dest=f.name, type=kind, default=value, choices=listed,
                                metavar=None if listed else metavar, help=help_text)


def config_from_args(cls: type, args: argparse.Namespace, **given: Any) -> Any:
    """An instance of dataclass ``cls`` from what ``add_config_arguments`` parsed; ``given``
    fields win (what the command computes itself)."""
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in given:
            values[f.name] = given[f.name]
            continue
        kind = _scalar(hints[f.name])
        if dataclasses.is_dataclass(kind):
            values[f.name] = config_from_args(kind, args)
        elif hasattr(args, f.name):
            values[f.name] = getattr(args, f.name)
    return cls(**values)


def to_json(config: Any) -> str:
    """A config dataclass (nested ones included) as JSON."""
    return json.dumps(dataclasses.asdict(config))


def from_json(cls: type, text: str | Mapping[str, Any]) -> Any:
    """The dataclass ``to_json`` wrote, nested dataclasses rebuilt; an unknown key is an error."""
    raw = json.loads(text) if isinstance(text, str) else dict(text)
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(raw) - names
    if unknown:
        raise ParameterError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
    for name, value in raw.items():
        kind = _scalar(hints[name])
        if dataclasses.is_dataclass(kind) and isinstance(value, Mapping):
            raw[name] = from_json(kind, value)
    return cls(**raw)
