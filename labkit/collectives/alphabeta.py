"""The alpha-beta model of a collective: t(S) = alpha + S / B, fitted to measured rows.

alpha is the per-call latency (software, synchronisation, the first hop), B the bandwidth a
large message gets. Kept as JSON (``save``/``load``) for the scaling-and-cost lesson.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from labkit.collectives.formulas import CollectiveRow, bus_factor
from labkit.errors import ParameterError


@dataclass
class AlphaBeta:
    """t = alpha + S / B fitted to one op's times: alpha in us, B the algorithm bandwidth in
    GB/s (S as in the size column); ``busbw_gbps`` = B * bus factor, comparable to link peak."""

    op: str
    backend: str
    n: int
    alpha_us: float
    beta_gbps: float
    busbw_gbps: float
    r2: float
    points: int
    in_place: bool | None = None

    def predict_us(self, size: float) -> float:
        return self.alpha_us + size / (self.beta_gbps * 1e3)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AlphaBeta:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> AlphaBeta:
        return cls.from_dict(json.loads(Path(path).read_text()))


def fit_alpha_beta(rows: list[CollectiveRow] | list[dict], op: str = "all_reduce",
                   in_place: bool | None = None, backend: str = "") -> AlphaBeta:
    """Fit t = alpha + S/B to ``op``'s rows (one placement, or both if None) by least squares
    on relative error; ``r2`` is measured the same way."""
    rows = [r if isinstance(r, CollectiveRow) else CollectiveRow(**r) for r in rows]
    pts = [(r.size, r.time_us) for r in rows
           if r.op == op and (in_place is None or r.in_place == in_place)]
    ranks = {r.nranks for r in rows if r.op == op}
    if len({s for s, _ in pts}) < 2 or len(ranks) != 1:
        raise ParameterError(f"fit needs {op} rows of one world size at 2 or more sizes")
    # Weighted by 1/t^2, i.e. relative errors: times span orders of magnitude, and plain least
    # squares would let the largest sizes set alpha (a 60 ms point outweighs every 1 ms one).
    w = [1.0 / t**2 for _, t in pts]
    total = sum(w)
    mx = sum(wi * s for wi, (s, _) in zip(w, pts, strict=True)) / total
    my = sum(wi * t for wi, (_, t) in zip(w, pts, strict=True)) / total
    sxx = sum(wi * (s - mx) ** 2 for wi, (s, _) in zip(w, pts, strict=True))
    slope = sum(wi * (s - mx) * (t - my) for wi, (s, t) in zip(w, pts, strict=True)) / sxx
    if slope <= 0:
        raise ParameterError(f"{op} time does not grow with size here: no bandwidth to fit")
    alpha = my - slope * mx
    ss_res = sum(wi * (t - alpha - slope * s) ** 2 for wi, (s, t) in zip(w, pts, strict=True))
    ss_tot = sum(wi * (t - my) ** 2 for wi, (_, t) in zip(w, pts, strict=True))
    beta, n = 1 / (slope * 1e3), ranks.pop()
    return AlphaBeta(op, backend, n, alpha, beta, beta * bus_factor(op, n),
                     1 - ss_res / ss_tot if ss_tot > 0 else 1.0, len(pts), in_place)


