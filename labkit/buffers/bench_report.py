"""The buffer benchmark's results as tables, the notes that explain a run where agents started
late or a window saw nothing, and a sweep's verdict on whether the server or the clients ran out
first.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from labkit.buffers.bench_tracking import DRAIN_QUIET_S, LEAD_ROUND_TRIPS
from labkit.course.tables import Table

TOGETHER = 0.9  # a phase with every agent pushing less of the time than this gets a note

COLUMNS = ("agents", "impl", "push_per_s", "pull_per_s", "e2e_per_s", "server_cpu_push",
           "server_cpu_e2e", "lost", "duplicates", "malformed")


def _cell(column: str, value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        if "cpu" in column:
            return f"{value:.2f}"
        return f"{value:.1f}" if column.endswith("mb_per_s") else f"{value:.0f}"
    return str(value)


def table(rows: list[dict[str, Any]], columns: tuple[str, ...] = COLUMNS) -> Table:
    """Result rows as a table (text, or HTML in a notebook: ``labkit.course.tables.show``); a
    rate that could not be measured shows "n/a" (:func:`notes` says why), a skipped
    implementation shows its reason."""
    cells = []
    for row in rows:
        line = [_cell(c, row.get(c)) for c in columns]
        if row.get("skipped"):
            line = line[:2] + [f"skipped: {row['skipped']}"] + [""] * (len(columns) - 3)
        cells.append(tuple(line))
    right = tuple(not all(isinstance(r.get(c), str) for r in rows) for c in columns)
    return Table(tuple(columns), tuple(cells), right)


@dataclass(frozen=True)
class Explained:
    """A table and the notes that explain its rows; shown like a table, the notes under it."""

    table: Table
    notes: tuple[str, ...]

    def __str__(self) -> str:
        return "\n".join([str(self.table), *self.notes])

    def _repr_html_(self) -> str:
        notes = "".join(f"<p>{html.escape(note)}</p>" for note in self.notes)
        return self.table._repr_html_() + notes


def notes(row: dict[str, Any], seconds: float) -> list[str]:
    """Sentences for a row whose numbers need context: agents that started late or pushed
    apart, a window in which a rate could not be measured, experiences that never came back."""
    if row.get("skipped"):
        return []
    who = f"{row['impl']} ({row['agents']} agents)" if "agents" in row else row["impl"]
    late = (f"the last agent started {row.get('late_start_s') or 0:g} s after its window "
            f"opened (the command went out {row.get('lead_s') or 0:g} s early, "
            f"{LEAD_ROUND_TRIPS:g} measured round trips)")
    apart = (f"{late}, and the agents' final batches, finished rather than cut, ended "
             f"{row.get('end_spread_s') or 0:g} s apart")
    out = []
    together = row.get("push_overlap") or 0.0
    if row["push_per_s"] is None:
        out.append(f"{who}: no agent pushed in the {seconds:g} s push window: {late}. A busy "
                   "machine wakes its processes late; raise the window.")
    elif together < TOGETHER:
        out.append(f"{who}: the agents pushed together for {100 * together:.0f}% of the push "
                   f"phase: {apart}. push/s adds up each agent's own rate; while fewer agents "
                   "pushed, each had more of the machine, so the sum over-states what they "
                   "sustain together. A longer window makes these edges a smaller share.")
    e2e_share = row.get("e2e_overlap") or 0.0
    if row["e2e_per_s"] is None:
        out.append(f"{who}: at no moment of the {seconds:g} s end-to-end window was every "
                   f"agent pushing, so there is no end-to-end rate: {late}.")
    elif e2e_share < TOGETHER:
        out.append(f"{who}: end to end is counted over the {e2e_share * seconds:.2f} s "
                   f"({100 * e2e_share:.0f}% of the window) in which every agent pushed.")
    if row["pull_per_s"] is None:
        out.append(f"{who}: nothing came back to the learner, so there is no pull rate.")
    if row.get("lost"):
        out.append(f"{who}: {row['lost']} pushed experience(s) never came back, though the "
                   f"learner pulled until its pulls had been empty for {DRAIN_QUIET_S:g} s.")
    return out


def explained_table(rows: list[dict[str, Any]], seconds: float,
                    columns: tuple[str, ...] = COLUMNS) -> Explained:
    """:func:`table`, then the :func:`notes` of every row that needs one (``str`` is the
    text; ``labkit.course.tables.show`` shows HTML in a notebook)."""
    return Explained(table(rows, columns),
                     tuple(note for row in rows for note in notes(row, seconds)))


def sweep_summary(points: list[dict[str, Any]], impl: str) -> str:
    """Where ``impl``'s push rate peaked in a sweep, and the most of a core Redis used."""
    rows = [p for p in points if p["impl"] == impl and p.get("push_per_s") is not None]
    if not rows:
        return f"{impl}: no agent count gave a push rate (see the notes above)"
    best = max(rows, key=lambda p: p["push_per_s"])
    cpu = [p for p in rows if p.get("server_cpu_push") is not None]
    busiest = max(cpu, key=lambda p: p["server_cpu_push"]) if cpu else None
    server = ("the server's CPU was not available" if busiest is None else
              f"Redis used at most {busiest['server_cpu_push']:.2f} of a core "
              f"(at {busiest['agents']} agents)")
    return (f"{impl}: push rate peaked at {best['push_per_s']:.0f}/s with {best['agents']} "
            f"agent(s); {server}")


BUSY = 0.9  # of one core: a Redis server this busy is the bottleneck (commands run on one thread)
NEAR_PEAK = 0.9  # a push rate this close to a sweep's peak has stopped growing


@dataclass(frozen=True)
class Bottleneck:
    """Which side of one implementation's sweep ran out first, from the sweep's own numbers."""

    impl: str
    most_agents: int  # the largest agent count that gave a push rate
    peak_per_s: float
    peak_agents: int
    knee_agents: int  # the fewest agents whose push rate came within NEAR_PEAK of the peak
    knee_cpu: float | None  # the share of a core the server used at knee_agents
    max_cpu: float | None  # the most of a core the server used in the whole sweep
    busy_from: int | None  # the fewest agents at which the server used >= BUSY of a core
    busy_after: bool  # ... and it stayed that busy at every larger agent count
    cores: int | None  # cores the agents, the learner and the server shared
    first: str  # "server", "clients", "neither", "one point" or "unknown" (no server CPU)

    def describe(self) -> str:
        """The findings, one a line: the server's CPU, the push rate, who ran out first."""
        if self.max_cpu is None:
            server = "the server's CPU was not measured (a server on another machine?)"
        elif self.busy_from is None:
            server = (f"the server never used more than {self.max_cpu:.2f} of a core up to "
                      f"{_agents(self.most_agents)}")
        else:
            server = (f"the server used >= {BUSY:g} of a core "
                      + (f"from {_agents(self.busy_from)} on" if self.busy_after else
                         f"first at {_agents(self.busy_from)} (not at every larger count)"))
        rate = (f"the push rate peaked at {self.peak_per_s:.0f}/s with "
                f"{_agents(self.peak_agents)} and first came within "
                f"{100 * (1 - NEAR_PEAK):.0f}% of that at {_agents(self.knee_agents)}")
        knee_cpu = "not measured" if self.knee_cpu is None else f"{self.knee_cpu:.2f} of a core"
        verdict = {
            "server": (f"the server saturated first: it used {knee_cpu} at "
                       f"{_agents(self.knee_agents)}, where the push rate stopped growing"),
            "clients": (f"the clients saturated first: the push rate stopped growing at "
                        f"{_agents(self.knee_agents)} while the server used {knee_cpu}"),
            "neither": (f"neither saturated: the push rate was still growing at "
                        f"{_agents(self.most_agents)}"),
            "one point": "one agent count cannot show where the push rate stops growing",
            "unknown": "which side saturated first needs the server's CPU",
        }[self.first]
        shared = "" if self.cores is None else (
            f" (agents, learner and server shared {self.cores} cores)")
        return f"{self.impl}: {server}\n  {rate}\n  -> {verdict}{shared}"


def _agents(n: int) -> str:
    return f"{n} agent" if n == 1 else f"{n} agents"


def bottleneck(points: list[dict[str, Any]], impl: str, cores: int | None = None) -> Bottleneck | None:
    """``impl``'s rows of a sweep over agent counts, read for who ran out first: the server
    (it used :data:`BUSY` of a core or more at the agent count where the push rate stopped
    growing) or the clients (the rate stopped growing with the server below that). None when
    no agent count gave a push rate."""
    rows = sorted((p for p in points if p["impl"] == impl and p.get("push_per_s") is not None),
                  key=lambda p: p["agents"])
    if not rows:
        return None
    peak = max(rows, key=lambda p: p["push_per_s"])
    knee = next(p for p in rows if p["push_per_s"] >= NEAR_PEAK * peak["push_per_s"])

    busy = [p["agents"] for p in rows if (p.get("server_cpu_push") or 0.0) >= BUSY]
    busy_from = busy[0] if busy else None
    busy_after = busy_from is not None and all(
        (p.get("server_cpu_push") or 0.0) >= BUSY for p in rows if p["agents"] >= busy_from)
    cpu = [p["server_cpu_push"] for p in rows if p.get("server_cpu_push") is not None]
    max_cpu = max(cpu) if cpu else None
    if max_cpu is None:
        first = "unknown"
    elif (knee.get("server_cpu_push") or 0.0) >= BUSY:
        first = "server"
    elif len(rows) == 1:
        first = "one point"
    elif knee is not rows[-1]:
        first = "clients"
    else:
        first = "neither"
    return Bottleneck(
        impl=impl, most_agents=rows[-1]["agents"], peak_per_s=peak["push_per_s"],
        peak_agents=peak["agents"], knee_agents=knee["agents"],
        knee_cpu=knee.get("server_cpu_push"), max_cpu=max_cpu,
        busy_from=busy_from, busy_after=busy_after,
        cores=cores, first=first)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def headline_ratios(report: dict[str, Any], chunk: int | None) -> dict[str, Any]:
    """The headline ratios: the list buffer (at ``chunk``) against the guide end to end, and its
    push against redis-benchmark's RPUSH, in items/s and in bytes/s."""
    rows = report["results"]
    listed = next((r for r in rows if r["impl"] == "list" and r.get("chunk") == chunk), None)
    guide = next((r for r in rows if r["impl"] == "guide"), None)
    ceiling = report["redis_benchmark_rpush_per_s"]
    ceiling_mb = report["redis_benchmark_mb_per_s"]
    return {
        "list_vs_guide_e2e": _ratio(listed and listed["e2e_per_s"], guide and guide["e2e_per_s"]),
        "list_vs_redis_benchmark": _ratio(listed and listed["push_per_s"], ceiling),
        "list_push_bytes_vs_redis_benchmark": _ratio(listed and listed["push_mb_per_s"],
                                                     ceiling_mb),
    }


CHUNK_COLUMNS = ("impl", "chunk", "parser", "push_per_s", "push_mb_per_s", "pull_per_s",
                 "e2e_per_s", "e2e_mb_per_s", "server_cpu_push", "server_cpu_e2e",
                 "agents_cpu_e2e", "learner_cpu_e2e", "lost")
E2E_TARGET = 50.0  # the lesson's targets: list end to end >= 50x the guide's, and its push
PUSH_TARGET = 0.5  # >= half of redis-benchmark's pipelined RPUSH, in bytes/s


def chunk_findings(report: dict[str, Any], chunk: int | None) -> list[str]:
    """Sentences from a chunk sweep (``bench_sweep.sweep_chunks``) or a measurement of the guide
    and the list buffer (``bench_core.measure_buffers``) about the list buffer at ``chunk``:
    against the guide end to end, its push against redis-benchmark in bytes/s, each beside the
    lesson's target, where the CPU went in the end-to-end window, and each round's rate."""
    rows = [r for r in report["results"] if r.get("skipped") is None]
    if "chunks" in report:  # a sweep: its rows of the main parser (the Python ones follow)
        rows = [r for r in rows if r["impl"] == "guide" or "vs_guide_e2e" in r]
    main = rows
    row = next((r for r in main if r["impl"] == "list" and r["chunk"] == chunk), None)
    guide = next((r for r in main if r["impl"] == "guide"), None)
    if row is None or guide is None:
        return [f"no list row at chunk {chunk} beside the guide's in this report"]
    ratios = headline_ratios({**report, "results": main}, chunk)
    e2e, push = ratios["list_vs_guide_e2e"], ratios["list_push_bytes_vs_redis_benchmark"]
    lines = []
    if e2e is None:
        lines.append("end to end: no rate for one of the two (see the notes above)")
    else:
        verdict = "meets" if e2e >= E2E_TARGET else "falls short of"
        lines.append(f"end to end, chunks of {chunk}: {row['e2e_per_s']:.0f}/s against the "
                     f"guide's {guide['e2e_per_s']:.0f}/s, {e2e:.1f}x: {verdict} the "
                     f"{E2E_TARGET:g}x target")
    if push is None:
        lines.append("push vs redis-benchmark: no ceiling (redis-benchmark is not installed)")
    else:
        verdict = "meets" if push >= PUSH_TARGET else "falls short of"
        lines.append(f"push, chunks of {chunk}: {row['push_mb_per_s']:.1f} MB/s of payload, "
                     f"{100 * push:.0f}% of redis-benchmark's pipelined RPUSH of the same value "
                     f"size ({report['redis_benchmark_mb_per_s']:.1f} MB/s): {verdict} the "
                     f"{100 * PUSH_TARGET:.0f}% target")
    cpu = {who: row.get(f"{who}_cpu_e2e") for who in ("server", "agents", "learner")}
    if all(v is not None for v in cpu.values()):
        used = sum(cpu.values())
        cores = report.get("cpu_count")
        lines.append(f"CPU in the end-to-end window (cores): server {cpu['server']:.2f}, agents "
                     f"{cpu['agents']:.2f}, learner {cpu['learner']:.2f}; {used:.2f} of the "
                     f"machine's {cores or '?'} in all")
        if cores and used < BUSY * min(cores, 1 + report.get("agents", 1)):
            lines.append(f"  these processes had {used:.2f} cores between them, not the "
                         f"{cores} the machine has: something else was using it, and every rate "
                         "here is below what they reach alone (the ratios, taken side by side, "
                         "suffer less)")
    if (report.get("rounds") or 1) > 1:
        def each(r: dict[str, Any]) -> str:
            return ", ".join("n/a" if v is None else f"{v:.0f}" for v in r["e2e_rounds"] or [])

        lines.append(f"medians of {report['rounds']} rounds, taken in turns; end to end in each "
                     f"round: guide {each(guide)}/s, list {each(row)}/s")
    best = report.get("best_chunk")
    if best is not None and best != chunk:
        top = next(r for r in main if r["impl"] == "list" and r["chunk"] == best)
        lines.append(f"the best end-to-end rate of the sweep was at chunks of {best}: "
                     f"{top['e2e_per_s']:.0f}/s, {top['vs_guide_e2e']}x the guide")
    return lines
