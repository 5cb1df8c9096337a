"""One run of ``labkit bench collectives`` as data, and its text: the nccl-tests table, CSV,
and the verdict of a measured busbw against a stated link bandwidth (``--expect``).

The table is nccl-tests' (``writeResultHeader``, ``writeBenchmarkLine*`` and
``writeResultFooter`` in ``src/util.cu``): one line per size, out-of-place then in-place, the
per-iteration columns with ``-I 1``, and the footer lines ``# Out of bounds values`` and
``# Avg bus bandwidth`` (the mean busbw over every line and placement, printed with ``%g``).
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from labkit.collectives.formulas import CollectiveRow
from labkit.errors import ParameterError

if TYPE_CHECKING:
    from labkit.collectives.alphabeta import AlphaBeta

# What busbw is for, in nccl-tests' own words (doc/PERFORMANCE.md, "Bus bandwidth"); the doc
# gives no pass mark, so the verdict states the ratio and nothing more.
PERFORMANCE_MD = "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md"
BUSBW_MEANING = ('nccl-tests doc/PERFORMANCE.md: busbw is computed so that "we can compare it '
                 'with the hardware peak bandwidth, independently of the number of ranks", and '
                 '"should reflect the speed of the hardware bottleneck: NVLink, PCI, QPI, or '
                 'network"; it sets no pass mark, so the ratio is the answer')


@dataclass
class CollectivesReport:
    """Rows of one run plus what it ran on; ``bench_vs_bare`` is bench busbw / bare busbw.
    ``devices``, ``env``, ``nccl_version``, ``started`` and ``ended`` are what nccl-tests' JSON
    records besides the rows (``labkit.collectives.nccl_json``)."""

    rows: list[CollectiveRow]
    backend: str
    device: str
    world_size: int
    nnodes: int
    nproc_per_node: int
    torch_version: str
    params: dict[str, Any] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)
    bare_size: int | None = None
    bare_all_reduce_time_us: float | None = None
    bare_all_reduce_busbw: float | None = None
    bench_all_reduce_busbw: float | None = None
    bench_vs_bare: float | None = None
    seconds: float = 0.0
    devices: list[dict[str, Any]] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    nccl_version: int | None = None
    per_iter_clock: str = ""
    started: str = ""
    ended: str = ""

    @property
    def wrong(self) -> int:
        return sum(max(0, r.wrong) for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def fit(self, op: str = "all_reduce", in_place: bool | None = None) -> AlphaBeta:
        from labkit.collectives.alphabeta import fit_alpha_beta

        return fit_alpha_beta(self.rows, op, in_place, backend=self.backend)


def float_str(value: float, width: int) -> str:
    """nccl-tests' ``getFloatStr``: 2 decimals if they fit in ``width``, else 1, else 0, else
    an exponent; a time column is 7 wide, a bandwidth 6."""
    for text in (f"{value:.2f}", f"{value:.1f}", f"{value:.0f}"):
        if len(text) <= width:
            return text
    return f"{value:.1e}" if width >= 7 else f"{value:.0e}"


def _time(us: float) -> str:
    return float_str(us, 7)


def _bw(gbps: float) -> str:
    """nccl-tests' 6-wide bandwidth, except below 0.1 GB/s (CPU runs are far below 0.01 GB/s,
    which nccl-tests prints as 0.00): 2 significant digits there."""
    return f"{gbps:.2g}" if 0 < gbps < 0.1 else float_str(gbps, 6)


ITER_COLUMNS = ("i_min", "i_max", "i_p50", "i_p99", "i_cv%")  # nccl-tests' four, and p50


def measured_cells(r: CollectiveRow | None, per_iter: bool) -> list[str]:
    """One placement's cells as nccl-tests prints them: time, algbw, busbw, #wrong, and with
    ``per_iter`` the per-iteration columns; all "N/A" for a placement not run."""
    if r is None:
        return ["N/A"] * (4 + len(ITER_COLUMNS) * per_iter)
    cells = [_time(r.time_us), _bw(r.algbw), _bw(r.busbw), "N/A" if r.wrong < 0 else str(r.wrong)]
    if per_iter:
        s = r.iter_stats()
        cells += ([_time(s.min_us), _time(s.max_us), _time(s.p50_us), _time(s.p99_us),
                   float_str(s.cv_pct, 7)] if s else ["N/A"] * len(ITER_COLUMNS))
    return cells


def _cells(r: CollectiveRow | None, per_iter: bool) -> str:
    widths = [7, 7, 7, 6] + [7] * len(ITER_COLUMNS) * per_iter
    return "".join(f"  {c:>{w}}" for c, w in zip(measured_cells(r, per_iter), widths, strict=True))


def format_table(rows: list[CollectiveRow]) -> str:
    """The nccl-tests text table, one block per op, out-of-place and in-place side by side,
    with the per-iteration columns when the rows have them and nccl-tests' two footer lines."""
    per_iter = any(r.iter_times_us for r in rows)
    extra = "".join(f"  {c:>7}" for c in ITER_COLUMNS) if per_iter else ""
    units = ("".join(f"  {u:>7}" for u in ("(us)",) * 4 + ("(%)",)) if per_iter else "")
    width = 36 + len(extra)
    head = f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}"
    cols = f"  {'time':>7}  {'algbw':>7}  {'busbw':>7}  {'#wrong':>6}" + extra
    unit_line = (f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}"
                 + (f"  {'(us)':>7}  {'(GB/s)':>7}  {'(GB/s)':>7}  {'':>6}" + units) * 2)
    suffix = " (+ per-iteration)" if per_iter else ""
    lines: list[str] = []
    for op in dict.fromkeys(r.op for r in rows):
        mine = [r for r in rows if r.op == op]
        lines += [f"# {op}, {mine[0].nranks} ranks",
                  f"# {'':>46}  {'out-of-place' + suffix:^{width}}  {'in-place' + suffix:^{width}}",
                  head + cols * 2, unit_line]
        for key in dict.fromkeys((r.cycle, r.size) for r in mine):
            pair = {r.in_place: r for r in mine if (r.cycle, r.size) == key}
            first = next(iter(pair.values()))
            lines.append(f"{first.size:>12}  {first.count:>12}  {first.type:>8}  "
                         f"{first.redop:>6}  {first.root:>6}"
                         + _cells(pair.get(False), per_iter) + _cells(pair.get(True), per_iter))
        bad = sum(r.wrong > 0 for r in mine)
        lines.append(f"# {'Out of bounds values':<20} : {bad} {'FAILED' if bad else 'OK'}")
        lines.append(f"# {'Avg bus bandwidth':<20} : {avg_busbw(mine):g} ")
        lines.append("")
    return "\n".join(lines)


def avg_busbw(rows: list[CollectiveRow]) -> float:
    """nccl-tests' ``# Avg bus bandwidth``: the mean busbw over every timed line it printed."""
    return statistics.fmean(r.busbw for r in rows) if rows else 0.0


SCALARS = [f.name for f in fields(CollectiveRow) if f.name not in ("iter_times_us",
                                                                  "rank_iter_times_us")]


def to_csv(rows: list[CollectiveRow]) -> str:
    """One CSV line per row: its scalar fields, and ``iter_p50_us``/``iter_p99_us`` (empty
    without per-iteration timing); the per-iteration lists are in the JSON outputs."""
    out = io.StringIO()
    writer = csv.DictWriter(out, [*SCALARS, "iter_p50_us", "iter_p99_us"], lineterminator="\n")
    writer.writeheader()
    for r in rows:
        s = r.iter_stats()
        writer.writerow({k: getattr(r, k) for k in SCALARS}
                        | {"iter_p50_us": s.p50_us if s else "", "iter_p99_us": s.p99_us if s else ""})
    return out.getvalue()


@dataclass(frozen=True)
class LinkVerdict:
    """One op's busbw against a stated link bandwidth (GB/s, 1e9 B/s): at the largest size
    (the mean of that size's rows: bandwidth matters at large sizes, doc/PERFORMANCE.md,
    "Time")
    and at the best size; each as a ratio of the link."""

    op: str
    link_gbps: float
    size: int
    busbw: float
    peak_size: int
    peak_busbw: float

    @property
    def ratio(self) -> float:
        return self.busbw / self.link_gbps

    @property
    def peak_ratio(self) -> float:
        return self.peak_busbw / self.link_gbps

    def line(self) -> str:
        return (f"# {self.op}: busbw {self.busbw:.4g} GB/s at {self.size} B (largest size) = "
                f"{self.ratio:.3g} x the stated link bandwidth of {self.link_gbps:g} GB/s; best "
                f"{self.peak_busbw:.4g} GB/s at {self.peak_size} B = {self.peak_ratio:.3g} x")


def parse_expect(text: str | float) -> float:
    """A link bandwidth in GB/s from ``--expect``: a finite number above 0."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ParameterError(f"--expect wants the link's bandwidth in GB/s, a number above 0 "
                             f"(a 400 Gb/s NIC is 50 GB/s), got {text!r}")
    return value


def link_verdicts(rows: list[CollectiveRow], link_gbps: float) -> list[LinkVerdict]:
    """Per op, its busbw at the largest size and at its best size against ``link_gbps``."""
    link_gbps = parse_expect(link_gbps)
    out = []
    for op in dict.fromkeys(r.op for r in rows):
        mine = [r for r in rows if r.op == op]
        largest = max(r.size for r in mine)
        best = max(mine, key=lambda r: r.busbw)
        out.append(LinkVerdict(op, link_gbps, largest,
                               statistics.fmean(r.busbw for r in mine if r.size == largest),
                               best.size, best.busbw))
    return out


def verdict_text(rows: list[CollectiveRow], link_gbps: float, backend: str = "") -> str:
    """The ``--expect`` lines: one per op, then what busbw is compared with, cited."""
    where = f" (measured on {backend})" if backend else ""
    return "\n".join([v.line() for v in link_verdicts(rows, link_gbps)]
                     + [f"# {BUSBW_MEANING}{where}: {PERFORMANCE_MD}"])
