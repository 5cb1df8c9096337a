"""The errors labkit raises: one base class, so callers can catch everything labkit says."""

from __future__ import annotations


class LabkitError(Exception):
    """A problem labkit can explain: the message says what went wrong and how to fix it."""


class ServiceError(LabkitError):
    """An embedded or external service (Redis, NATS) could not be started or reached."""


class LaunchError(LabkitError):
    """A distributed job could not be launched, failed, or timed out."""


class ParameterError(LabkitError):
    """A notebook parameter or command-line value is unknown or invalid."""
