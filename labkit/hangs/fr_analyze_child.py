"""PyTorch's flight-recorder analyzer on one hang's dumps, in a process of its own, as an operator
runs it; prints what it found as one JSON object (``labkit.hangs.fr_analyze`` reads it).

``python -m labkit.hangs.fr_analyze_child HANG_FOLDER WORLD_SIZE`` runs torch's own code twice:

1. ``torchfrtrace <folder>/torch -p fr_rank_`` (its entry point, ``fr_trace.main``, with
   ``--allow-incomplete-ranks`` when a rank left no dump): its printed report, or the error it
   stopped with. It unpickles the dumps: files this job's own ranks wrote into the job's private
   temporary folder, read by torch's code in this throwaway process, never by labkit;
2. its matching (``build_db``) on torch's JSON dumps of the same buffers (``who/rank<R>.json``,
   what torch's debug server feeds it), with ``pg_config`` filled in from the entries and the
   world size where the dump names no such group or lists it without ranks (gloo in torch
   2.13), and saying so.
"""

from __future__ import annotations

import io
import json
import logging
import sys
import traceback
from pathlib import Path
from typing import Any

from labkit.hangs.torch_fr import FR_PREFIX, TORCH_FOLDER, read_who


def _capture() -> io.StringIO:
    text = io.StringIO()
    handler = logging.StreamHandler(text)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logging.getLogger("Flight Recorder").addHandler(handler)
    return text


def _error(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()[:500]


def run_cli(folder: Path, world_size: int, dumps: int) -> dict[str, Any]:
    from torch.distributed.flight_recorder import fr_trace

    argv = [str(folder / TORCH_FOLDER), "-p", FR_PREFIX]
    if dumps < world_size:
        argv.append("--allow-incomplete-ranks")
    text = _capture()
    try:
        fr_trace.main(argv)
        error = ""
    except BaseException as exc:  # noqa: BLE001 (what it stopped with is the finding)
        error = _error(exc)
    return {"argv": ["torchfrtrace", *argv], "ok": not error, "error": error,
            "text": text.getvalue()[-6000:]}


def _repair(trace: dict[str, Any], world_size: int) -> bool:
    """Fill in a group the entries name that pg_config lacks or lists with no ranks."""
    named = {tuple(e["process_group"]) for e in trace.get("entries", [])}
    config = trace.get("pg_config", {})
    missing = [(name, desc) for name, desc in named
               if name not in config or config[name].get("ranks") in ("", "[]")]
    for name, desc in missing:
        trace.setdefault("pg_config", {})[name] = {
            "name": name, "desc": desc, "ranks": str(list(range(world_size)))}
    return bool(missing)


def run_db(folder: Path, world_size: int) -> dict[str, Any]:
    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.config_manager import JobConfig

    args = JobConfig().parse_args([])
    args.allow_incomplete_ranks = True
    details, repaired = {}, False
    for rank, who in read_who(folder).items():
        trace = who["trace"]
        repaired = _repair(trace, world_size) or repaired
        details[f"rank{rank}"] = {"rank": rank, "host_name": who["writer"]["host"], **trace}
    if not details:
        return {"ok": False, "error": "no JSON dumps", "repaired": False, "collectives": []}
    text = _capture()
    try:
        db = build_db(details, args, str(next(iter(details.values()))["version"]))
    except BaseException as exc:  # noqa: BLE001
        return {"ok": False, "error": _error(exc), "repaired": repaired, "collectives": [],
                "text": text.getvalue()[-6000:]}
    rows = [{"seq": c.collective_seq_id, "name": c.collective_name, "state": c.collective_state,
             "pass_check": c.pass_check,
             "missing_ranks": sorted(c.missing_ranks) if c.missing_ranks else [],
             "mismatches": {str(r): str(m.type_of_mismatch)
                            for r, m in (c.mismatch_collectives or {}).items()}}
            for c in db.collectives]
    return {"ok": True, "error": "", "repaired": repaired, "collectives": rows,
            "text": text.getvalue()[-6000:]}


def main(argv: list[str]) -> None:
    folder, world_size = Path(argv[0]), int(argv[1])
    dumps = len(list((folder / TORCH_FOLDER).glob(f"*{FR_PREFIX}*")))
    print(json.dumps({"dumps": dumps, "cli": run_cli(folder, world_size, dumps),
                      "db": run_db(folder, world_size)}))


if __name__ == "__main__":
    main(sys.argv[1:])
