"""The one percentile the lab reports: nearest rank, no interpolation.

The p-th percentile of n values is the value at rank ``ceil(p / 100 * n)`` in ascending order
(nearest rank: definition 1 of Hyndman & Fan, "Sample quantiles in statistical packages", The
American Statistician 50(4), 1996, the inverse of the empirical distribution function). It is
always one of the measured values: a p99 of round trips is a round trip that happened.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from labkit.errors import ParameterError


def percentile(values: Iterable[float], p: float) -> float:
    """The ``p``-th percentile (``0 < p <= 100``) of ``values``, nearest rank."""
    ordered = sorted(values)
    if not ordered:
        raise ParameterError("the percentile of no values is undefined")
    if not 0 < p <= 100:
        raise ParameterError(f"a percentile is in (0, 100], got {p}")
    return ordered[min(len(ordered), max(1, math.ceil(p / 100 * len(ordered)))) - 1]
