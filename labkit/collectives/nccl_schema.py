"""The structure of nccl-tests' JSON output as data, and a check of a file against it.

Written from nccl-tests v2.19.6 ``src/util.cu`` (JSON version 3): every key ``jsonKey`` writes,
in the order it writes them, with the kind of value (``jsonInt``, ``jsonSize_t``, ``jsonDouble``
as a number or ``"nan"``, ``jsonStr``, ``jsonBool`` as the string ``"true"``/``"false"``) and
where it writes null (``out_of_place`` when it skips that placement, ``nwrong`` without ``-c``).
Keys nccl-tests writes only sometimes (per-iteration objects with ``-I 1``, per-process rows with
more than one process) are optional. A real nccl-tests file matches it with no exception
(``tests/data/nccl_tests_json``); a labkit file matches it with ``LABKIT_NULLS`` and its extra
``labkit`` key (``labkit.collectives.nccl_json`` says why each).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

INT, SIZE, DOUBLE, STR, BOOLSTR, OKAY = "int", "size_t", "double", "string", "bool-string", "okay"


@dataclass(frozen=True)
class Key:
    """One key of an object: its name (``a|b``: one of two), its kind, whether it must be
    there, and whether nccl-tests writes null in it."""

    name: str
    kind: Any  # a kind string, a tuple of Keys (an object), or a one-item list (a list of)
    required: bool = True
    nullable: bool = False


PLACEMENT = (Key("time|cpu_time", DOUBLE), Key("alg_bw", DOUBLE), Key("bus_bw", DOUBLE),
             Key("nwrong", DOUBLE, nullable=True))
PER_ITER = (Key("skipped_iterations", INT), Key("min_us", DOUBLE), Key("max_us", DOUBLE),
            Key("avg_us", DOUBLE), Key("p50_us", DOUBLE), Key("p95_us", DOUBLE),
            Key("p99_us", DOUBLE), Key("stdev_us", DOUBLE), Key("cv_pct", DOUBLE),
            Key("times_us", [DOUBLE]), Key("per_process_max_times_us", [[DOUBLE]], False))
DEVICE = (Key("rank", INT), Key("group", INT), Key("pid", INT), Key("hostname", STR),
          Key("device", INT), Key("device_hex", STR), Key("device_info", STR))
CONFIG = (Key("nthreads", INT), Key("ngpus", INT), Key("minimum_bytes", SIZE),
          Key("maximum_bytes", SIZE), Key("step_factor|step_bytes", SIZE),
          Key("warmup_iters", INT), Key("iterations", INT), Key("aggregated_iterations", INT),
          Key("validation", INT), Key("graph", INT), Key("blocking_collectives", BOOLSTR),
          Key("per_iter_timing", BOOLSTR), Key("per_iter_skip", INT),
          Key("parallel_init", BOOLSTR), Key("devices", [DEVICE]))
RESULT = (Key("size", SIZE), Key("count", SIZE), Key("type", STR), Key("redop", STR),
          Key("root", STR), Key("out_of_place", PLACEMENT, nullable=True),
          Key("out_of_place_per_iter", PER_ITER, False), Key("in_place", PLACEMENT),
          Key("in_place_per_iter", PER_ITER, False), Key("actual_iterations", INT),
          Key("experiment_name", STR))
NCCL_TESTS_SCHEMA = (
    Key("version", INT), Key("start_time", STR), Key("args", [STR]), Key("env", [STR]),
    Key("nccl_version", INT), Key("config", CONFIG), Key("results", [RESULT]),
    Key("out_of_bounds", (Key("count", INT), Key("okay", BOOLSTR))),
    Key("average_bus_bandwidth", (Key("bandwidth", DOUBLE), Key("okay", OKAY))),
    Key("errors", [STR]), Key("end_time", STR))
# Where labkit's files hold a documented null that nccl-tests never writes (module docstring).
LABKIT_NULLS = frozenset({"nccl_version", "config.ngpus", "config.devices[].device",
                          "config.devices[].device_hex", "config.devices[].device_info",
                          "results[].in_place"})


def _kind_ok(value: Any, kind: str) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return {INT: isinstance(value, int) and not isinstance(value, bool),
            SIZE: isinstance(value, int) and not isinstance(value, bool) and value >= 0,
            DOUBLE: number or value in ("nan", "inf", "-inf"),
            STR: isinstance(value, str), BOOLSTR: value in ("true", "false"),
            OKAY: value in ("true", "false", "unchecked")}[kind]


def schema_problems(doc: Any, nulls: frozenset[str] = frozenset(),
                    extra: frozenset[str] = frozenset()) -> list[str]:
    """What in ``doc`` differs from nccl-tests' structure: missing or unknown keys, keys out of
    nccl-tests' order, wrong types; ``nulls`` are paths (``a.b[].c``) where null is allowed
    too, ``extra`` top-level keys allowed besides nccl-tests' own. Empty when it matches."""
    problems: list[str] = []

    def check(value: Any, kind: Any, path: str, nullable: bool) -> None:
        if value is None:
            if not (nullable or path in nulls):
                problems.append(f"{path or 'the file'}: null where nccl-tests writes {kind!r}"
                                if isinstance(kind, str) else f"{path}: null")
        elif isinstance(kind, list):
            if not isinstance(value, list):
                problems.append(f"{path}: expected a list, got {type(value).__name__}")
            else:
                for item in value:
                    check(item, kind[0], f"{path}[]", False)
        elif isinstance(kind, tuple):
            obj(value, kind, path)
        elif not _kind_ok(value, kind):
            problems.append(f"{path}: expected {kind}, got {value!r}"[:200])

    def obj(value: Any, keys: tuple[Key, ...], path: str) -> None:
        if not isinstance(value, dict):
            problems.append(f"{path or 'the file'}: expected an object, got "
                            f"{type(value).__name__}")
            return
        known, order = set(), []
        for key in keys:
            names = key.name.split("|")
            found = [n for n in names if n in value]
            known.update(names)
            if not found:
                if key.required:
                    problems.append(f"{path}{'.' if path else ''}{key.name}: missing")
                continue
            order.append(list(value).index(found[0]))
            check(value[found[0]], key.kind, f"{path}{'.' if path else ''}{found[0]}",
                  key.nullable)
        unknown = [k for k in value if k not in known and not (path == "" and k in extra)]
        problems.extend(f"{path}{'.' if path else ''}{k}: not a key nccl-tests writes"
                        for k in unknown)
        if order != sorted(order):
            problems.append(f"{path or 'top level'}: keys not in nccl-tests' order")

    obj(doc, NCCL_TESTS_SCHEMA, "")
    return list(dict.fromkeys(problems))
