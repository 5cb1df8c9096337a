"""nccl-tests' JSON output (``all_reduce_perf -J FILE.json``), written and read by labkit.

The format is nccl-tests' own (``src/util.cu``, JSON version 3 since v2.19.6: ``jsonOutputInit``,
``writeDeviceReport``, ``writeBenchmarkLine*``, ``writePerIterReport``, ``writeResultFooter``,
``writeErrors``, ``jsonOutputFinalize``): one object, written without spaces, with the keys in
nccl-tests' order, doubles as C's ``%lf`` (six decimals; NaN as the string ``"nan"``),
booleans as the strings ``"true"``/``"false"``, the root as ``%6i`` in a string, and ``/``
escaped. ``nccl_schema`` holds that structure as data and checks a file against it;
nccl-tests' ``tools/analyze_perf_json.py`` reads labkit's files unchanged.

What labkit writes where nccl-tests has no counterpart, and why:

- one file per op (nccl-tests runs one op per binary): ``PATH`` for one op, else ``STEM.OP.json``;
  an existing file is never overwritten: like nccl-tests, the next free ``PATH.0``, ``PATH.1``...
- ``args``: the ``labkit bench collectives`` command that reproduces the run;
- ``env``: rank 0's variables that bear on collectives (``iter_timing.ENV_PREFIXES``); nccl-tests
  writes the whole environment, which a shared file should not carry;
- ``nccl_version``: ``torch.cuda.nccl.version()`` as NCCL's code on nccl; **null on gloo**;
- ``config.ngpus``: 1 (one GPU per rank process) on GPUs; **null on CPU**; ``nthreads`` 1;
- ``config.devices``: one entry per rank (nccl-tests lists the first GPU of each process);
  ``device``, ``device_hex`` and ``device_info`` are the GPU's index, PCI address and name,
  **null on CPU**, which has none of them;
- ``out_of_place``: null where torch has the in-place form only (all_reduce, broadcast, reduce),
  which is what nccl-tests writes when it skips out-of-place; ``in_place``: **null** for
  all_to_all, which torch has out of place only;
- ``errors``: ``[]`` (nccl-tests writes NCCL's last error string, ``""`` when there is none);
- ``labkit``: one extra key saying what ran: writer, backend, each rank's device, torch, the
  world, how times were combined across ranks, the per-iteration clock, what was not run.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.collectives.formulas import AVERAGES, OPS, CollectiveRow, IterStats
from labkit.collectives.nccl_schema import LABKIT_NULLS
from labkit.collectives.report import CollectivesReport, avg_busbw
from labkit.errors import ParameterError

JSON_VERSION = 3  # JSON_FILE_VERSION in nccl-tests' src/util.cu (v2.19.6)
WRITER = "labkit bench collectives"
AVERAGE_FLAG = {"rank0": 0, "avg": 1, "min": 2, "max": 3}  # nccl-tests -a
assert set(AVERAGE_FLAG) == set(AVERAGES)

# --- writing -----------------------------------------------------------------------------------
def _emit(value: Any) -> str:
    """nccl-tests' JSON text: no spaces, doubles as ``%lf``, NaN as ``"nan"``, ``/`` escaped."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        raise TypeError("nccl-tests writes booleans as the strings 'true' and 'false'")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:f}" if math.isfinite(value) else json.dumps(str(value).lower())
    if isinstance(value, str):
        return json.dumps(value).replace("/", "\\/")
    if isinstance(value, dict):
        return "{" + ",".join(f"{_emit(str(k))}:{_emit(v)}" for k, v in value.items()) + "}"
    return "[" + ",".join(_emit(v) for v in value) + "]"


def _per_iter(stats: IterStats, row: CollectiveRow) -> dict[str, Any]:
    out: dict[str, Any] = {"skipped_iterations": stats.skipped}
    out |= {k: float(getattr(stats, k)) for k in ("min_us", "max_us", "avg_us", "p50_us",
                                                   "p95_us", "p99_us", "stdev_us", "cv_pct")}
    out["times_us"] = [float(t) for t in row.iter_times_us or []]
    if row.rank_iter_times_us and len(row.rank_iter_times_us) > 1:  # nccl-tests: nProcs > 1
        out["per_process_max_times_us"] = [[float(t) for t in r] for r in row.rank_iter_times_us]
    return out


def _placement(row: CollectiveRow | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {"time": float(row.time_us), "alg_bw": float(row.algbw), "bus_bw": float(row.busbw),
            "nwrong": None if row.wrong < 0 else float(row.wrong)}


def _results(rows: list[CollectiveRow], iters: int) -> list[dict[str, Any]]:
    out = []
    for key in dict.fromkeys((r.cycle, r.size) for r in rows):
        pair = {r.in_place: r for r in rows if (r.cycle, r.size) == key}
        first = next(iter(pair.values()))
        result: dict[str, Any] = {"size": first.size, "count": first.count, "type": first.type,
                                  "redop": first.redop, "root": f"{first.root:6d}"}
        for name, place in (("out_of_place", False), ("in_place", True)):
            row = pair.get(place)
            result[name] = _placement(row)
            stats = row.iter_stats() if row else None
            if stats:
                result[f"{name}_per_iter"] = _per_iter(stats, row)
        out.append(result | {"actual_iterations": iters, "experiment_name": ""})
    return out


def labkit_command(report: CollectivesReport, op: str, path: str = "") -> list[str]:
    """The ``labkit bench collectives`` command line that repeats this run for ``op``."""
    p = report.params
    args = ["labkit", "bench", "collectives", "--op", op, "--nnodes", str(report.nnodes),
            "--nproc-per-node", str(report.nproc_per_node), "-b", str(p.get("min_bytes", "")),
            "-e", str(p.get("max_bytes", "")), "-f", str(p.get("step_factor", 2)),
            "-n", str(p.get("iters", "")), "-w", str(p.get("warmup_iters", "")),
            "--average", str(p.get("average", "max")), "-N", str(p.get("cycles", 1)),
            "-I", str(int(bool(p.get("per_iter")))), "-K", str(p.get("per_iter_skip", 0)),
            "--backend", report.backend]
    return args + (["-J", path] if path else [])


def nccl_tests_document(report: CollectivesReport, op: str, path: str = "") -> dict[str, Any]:
    """One op of ``report`` as the object nccl-tests' ``-J`` writes (see the module docstring)."""
    rows = [r for r in report.rows if r.op == op]
    if not rows:
        raise ParameterError(f"the report has no {op} rows: ran {sorted({r.op for r in report.rows})}")
    p, gpu = report.params, report.device.startswith("cuda")
    config = {"nthreads": 1, "ngpus": 1 if gpu else None,
              "minimum_bytes": int(p.get("min_bytes", min(r.size for r in rows))),
              "maximum_bytes": int(p.get("max_bytes", max(r.size for r in rows))),
              "step_factor": int(p.get("step_factor", 2)),
              "warmup_iters": int(p.get("warmup_iters", 0)), "iterations": int(p.get("iters", 0)),
              "aggregated_iterations": 1, "validation": 1, "graph": 0,
              "blocking_collectives": "false",
              "per_iter_timing": "true" if p.get("per_iter") else "false",
              "per_iter_skip": int(p.get("per_iter_skip", 0)), "parallel_init": "false",
              "devices": report.devices}
    wrong = sum(r.wrong > 0 for r in rows)
    return {
        "version": JSON_VERSION, "start_time": report.started,
        "args": labkit_command(report, op, path), "env": list(report.env),
        "nccl_version": report.nccl_version, "config": config,
        "results": _results(rows, int(p.get("iters", 0))),
        "out_of_bounds": {"count": wrong, "okay": "false" if wrong else "true"},
        "average_bus_bandwidth": {"bandwidth": float(avg_busbw(rows)), "okay": "unchecked"},
        "errors": [],
        "labkit": {"writer": WRITER, "op": op, "backend": report.backend,
                   "devices": [f"cuda:{d['device']}" if d.get("device") is not None else "cpu"
                               for d in report.devices] or [report.device],
                   "torch_version": report.torch_version,
                   "world_size": report.world_size, "nnodes": report.nnodes,
                   "nproc_per_node": report.nproc_per_node,
                   "time_across_ranks": f"{p.get('average', 'max')} (nccl-tests -a "
                                        f"{AVERAGE_FLAG.get(p.get('average', 'max'))})",
                   "per_iter_clock": report.per_iter_clock or None,
                   "not_run": [s for s in report.skipped if s["op"] == op],
                   "nulls": sorted(LABKIT_NULLS)},
        "end_time": report.ended,
    }


def _free_path(path: Path) -> Path:
    """``path``, or the first of ``path.0``, ``path.1``... that does not exist (nccl-tests)."""
    candidate, n = path, 0
    while candidate.exists():
        candidate, n = Path(f"{path}.{n}"), n + 1
    return candidate


def write_nccl_tests_json(report: CollectivesReport, path: str | Path) -> list[Path]:
    """Write ``report`` as nccl-tests' JSON: ``path`` for one op, ``STEM.OP.json`` per op for
    several; never over an existing file (the next ``.N``, as nccl-tests does). The paths."""
    path = Path(path)
    if path.suffix.lower() != ".json":
        raise ParameterError(f"nccl-tests JSON goes to a .json file (it infers the type from "
                             f"the suffix), got {str(path)!r}")
    ops = list(dict.fromkeys(r.op for r in report.rows))
    if not ops:
        raise ParameterError("the report has no rows to write")
    written = []
    for op in ops:
        target = _free_path(path if len(ops) == 1 else path.with_suffix(f".{op}.json"))
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "x") as out:  # "x" as nccl-tests' "wx": never clobber a result
            out.write(_emit(nccl_tests_document(report, op, str(target))))
        written.append(target)
    return written


# --- reading -----------------------------------------------------------------------------------
BINARY_OPS = {"alltoall": "all_to_all"}  # nccl-tests' binary names that differ from labkit's


@dataclass
class NcclTestsRun:
    """One nccl-tests JSON file read back: its rows in labkit's form and what the file says
    about the run (``writer`` is "nccl-tests" or labkit's; ``labkit`` its extra block)."""

    path: str
    op: str
    rows: list[CollectiveRow]
    version: int | None
    writer: str
    backend: str
    nranks: int
    nccl_version: int | None
    avg_busbw: float | None
    out_of_bounds: int | None
    config: dict[str, Any] = field(default_factory=dict)
    devices: list[dict[str, Any]] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    start_time: str = ""
    end_time: str = ""
    labkit: dict[str, Any] | None = None

    def summary(self) -> str:
        """One line: who wrote it, what ran, on what."""
        version = self.nccl_version
        nccl = f"NCCL {version // 10000}.{version // 100 % 100}.{version % 100}" if version else \
            "no NCCL"
        names = [str(d["device_info"]) for d in self.devices if d.get("device_info")]
        names = names or [str(d) for d in (self.labkit or {}).get("devices", [])]
        where = ", ".join(dict.fromkeys(names)) or "devices not recorded"
        return (f"{self.writer} JSON v{self.version}, {self.op} on {self.nranks} ranks "
                f"({self.backend}, {where}), {nccl}, {len(self.rows)} rows, "
                f"{self.start_time} - {self.end_time}")

    def to_report(self) -> CollectivesReport:
        """The file as a ``CollectivesReport`` (no launch, ``seconds`` 0)."""
        block = self.labkit or {}
        hosts = len({d.get("hostname") for d in self.devices}) or 1
        nnodes = int(block.get("nnodes", hosts))
        devices = block.get("devices") or ["cuda"]
        return CollectivesReport(
            self.rows, self.backend, str(devices[0]), self.nranks, nnodes,
            int(block.get("nproc_per_node", max(1, self.nranks // nnodes))),
            str(block.get("torch_version", "")),
            {"source": self.path, "iters": self.config.get("iterations"),
             "warmup_iters": self.config.get("warmup_iters")},
            devices=self.devices, env=self.env, nccl_version=self.nccl_version,
            started=self.start_time, ended=self.end_time)


def _fail(path: str, what: str) -> ParameterError:
    return ParameterError(f"{path}: {what}")


def _number(value: Any, path: str, where: str) -> float:
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(path, f"{where}: expected a number, got {value!r}"[:200])
    return float(value)


def _op_of(doc: dict[str, Any]) -> str:
    block = doc.get("labkit")
    if isinstance(block, dict) and block.get("op"):
        return str(block["op"])
    args = doc.get("args") or [""]
    name = os.path.basename(str(args[0]))
    for suffix in ("_mpi", "_perf"):
        name = name.removesuffix(suffix)
    return BINARY_OPS.get(name, name) or "unknown"


def _nranks(doc: dict[str, Any], rows: list[CollectiveRow]) -> int:
    """labkit's world size; else nccl-tests' devices x threads x GPUs (one device entry per
    process: the first of its GPUs); else from busbw / algbw and the op's factor."""
    block, config = doc.get("labkit"), doc.get("config") or {}
    if isinstance(block, dict) and isinstance(block.get("world_size"), int):
        return block["world_size"]
    devices, threads, gpus = config.get("devices"), config.get("nthreads"), config.get("ngpus")
    if isinstance(devices, list) and devices and isinstance(threads, int) and isinstance(gpus, int):
        return len(devices) * threads * gpus
    for r in rows:
        if r.algbw > 0 and r.op in OPS and r.op not in ("broadcast", "reduce"):
            f = r.busbw / r.algbw  # 2(n-1)/n or (n-1)/n
            return max(1, round(2 / (2 - f) if r.op == "all_reduce" else 1 / (1 - f)))
    return 0


def _rows(doc: dict[str, Any], path: str, op: str) -> list[CollectiveRow]:
    rows: list[CollectiveRow] = []
    cycle, last = 0, -1
    for i, result in enumerate(doc["results"]):
        where = f"results[{i}]"
        if not isinstance(result, dict):
            raise _fail(path, f"{where}: expected an object")
        try:
            size, count = int(result["size"]), int(result["count"])
            kind, redop, root = str(result["type"]), str(result["redop"]), int(str(result["root"]))
        except (KeyError, TypeError, ValueError) as err:
            raise _fail(path, f"{where}: size, count, type, redop and root are needed "
                              f"({type(err).__name__}: {err})") from None
        if size <= last:  # sizes grow within a sweep: a smaller one starts the next -N cycle
            cycle += 1
        last = size
        for name, in_place in (("out_of_place", False), ("in_place", True)):
            m = result.get(name)
            if m is None:
                continue
            if not isinstance(m, dict):
                raise _fail(path, f"{where}.{name}: expected an object or null")
            t = m.get("time", m.get("cpu_time"))
            timing = result.get(f"{name}_per_iter") or {}
            wrong = m.get("nwrong")
            rows.append(CollectiveRow(
                op, size, count, kind, redop, root, _number(t, path, f"{where}.{name}.time"),
                _number(m.get("alg_bw"), path, f"{where}.{name}.alg_bw"),
                _number(m.get("bus_bw"), path, f"{where}.{name}.bus_bw"),
                -1 if wrong is None else int(_number(wrong, path, f"{where}.{name}.nwrong")),
                in_place, 0, cycle, timing.get("times_us") or None,
                timing.get("per_process_max_times_us") or None,
                int(timing.get("skipped_iterations", 0) or 0)))
    return rows


def read_nccl_tests_json(path: str | Path) -> NcclTestsRun:
    """Read nccl-tests' ``-J`` output (JSON versions 1 to 3, and labkit's) into labkit's rows;
    the op comes from the binary's name in ``args`` (``all_reduce_perf`` -> all_reduce)."""
    path = str(path)
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise _fail(path, "no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise _fail(path, f"cannot be read ({type(err).__name__}: {err})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise _fail(path, f"not JSON ({err.msg} at line {err.lineno} column {err.colno}); "
                          f"a run that died while writing leaves a cut-off file") from None
    if not isinstance(doc, dict) or "results" not in doc:
        if isinstance(doc, dict) and "config" in doc:
            errors = [e for e in doc.get("errors") or [] if e]
            raise _fail(path, "nccl-tests JSON without results: the run ended before its table"
                              + (f" (errors: {'; '.join(map(str, errors))})" if errors else ""))
        raise _fail(path, "not nccl-tests JSON output: no \"results\" (nccl-tests -J FILE.json "
                          "writes an object with version, config, results...)")
    if not isinstance(doc["results"], list):
        raise _fail(path, "\"results\" is not a list")
    op = _op_of(doc)
    rows = _rows(doc, path, op)
    nranks = _nranks(doc, rows)
    for r in rows:
        r.nranks = nranks
    block = doc.get("labkit") if isinstance(doc.get("labkit"), dict) else None
    average = doc.get("average_bus_bandwidth") or doc.get("average_bus_bandwidith") or {}
    bandwidth = average.get("bandwidth", average.get("bandwidith"))  # v1 before 2.17.9: typo
    bounds = doc.get("out_of_bounds") or {}
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    version = doc.get("nccl_version")
    return NcclTestsRun(
        path, op, rows, doc.get("version"), block.get("writer", WRITER) if block else "nccl-tests",
        str(block.get("backend")) if block else "nccl", nranks,
        version if isinstance(version, int) else None,
        None if bandwidth is None else _number(bandwidth, path, "average bus bandwidth"),
        bounds.get("count"), config, list(config.get("devices") or []),
        [str(a) for a in doc.get("args") or []], [str(e) for e in doc.get("env") or []],
        [str(e) for e in doc.get("errors") or []], str(doc.get("start_time", "")),
        str(doc.get("end_time", "")), block)
