"""Who to reach and how: hosts as ``[user@]host`` and the ssh settings every connection shares.

A host's name (without the user) is what the other hosts use to reach it: the first one is the
rendezvous endpoint, and every agent advertises its own name with ``--local-addr``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from labkit.errors import ParameterError

_NAME = re.compile(r"^[A-Za-z0-9_.:-]+$")  # a hostname, an IPv4 or an IPv6 address
_USER = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Host:
    """One host as given on the command line: ``name`` or ``user@name``."""

    name: str
    user: str | None = None

    @classmethod
    def parse(cls, spec: str) -> Host:
        user, at, name = spec.strip().rpartition("@")
        if not name or not _NAME.match(name) or (at and not _USER.match(user)):
            raise ParameterError(f"bad host {spec!r}: want a name or an address, optionally "
                                 "user@ in front (e.g. node1, root@10.0.0.2)")
        return cls(name, user or None)

    @property
    def target(self) -> str:
        """What ssh connects to."""
        return f"{self.user}@{self.name}" if self.user else self.name


def parse_hosts(specs: str | Sequence[str]) -> list[Host]:
    """``"h1,root@h2"`` (or a list of specs) as hosts; each name at most once."""
    items = specs.split(",") if isinstance(specs, str) else list(specs)
    hosts = [Host.parse(item) for item in items if item.strip()]
    if not hosts:
        raise ParameterError("--hosts needs at least one host")
    names = [h.name for h in hosts]
    if len(set(names)) != len(names):
        raise ParameterError(f"a host is named twice in {','.join(names)}: one agent per host")
    return hosts


@dataclass(frozen=True)
class SshSettings:
    """What every ssh connection of a launch uses (each ``None`` means ssh's own default,
    ``~/.ssh/config`` included)."""

    port: int | None = None
    user: str | None = None  # for hosts given without user@
    identity: str | None = None
    config: str | None = None  # ssh -F FILE
    options: tuple[str, ...] = ()  # ssh -o KEY=VALUE, in order

    def __post_init__(self) -> None:
        if self.port is not None and not 0 < self.port < 65536:
            raise ParameterError(f"--ssh-port must be 1-65535, got {self.port}")
        for option in self.options:
            if "=" not in option or option.startswith("="):
                raise ParameterError(f"--ssh-option wants KEY=VALUE (as ssh -o), got {option!r}")

    def argv(self, host: Host, *first: str) -> list[str]:
        """``ssh [first] ... TARGET``: BatchMode (never a password prompt), then these settings."""
        command = ["ssh", *first, "-o", "BatchMode=yes"]
        if self.config:
            command += ["-F", self.config]
        if self.port:
            command += ["-p", str(self.port)]
        if self.identity:
            command += ["-i", self.identity]
        for option in self.options:
            command += ["-o", option]
        user = host.user or self.user
        return [*command, f"{user}@{host.name}" if user else host.name]
