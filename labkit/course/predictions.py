"""Predict, then measure: a lesson's headline number, guessed before the run and checked after.

A lesson asks for a prediction in a cell tagged ``prediction`` (a variable left at None means
"the lesson's own model"), runs its experiment, then::

    p = resolve(predicted_busbw_gbps, model=cap_mbit / 8 / 1000, lesson="03",
                name="all_reduce busbw over the capped link", unit="GB/s",
                model_says="the cap's rate, cap_mbit / 8 / 1000")
    record(p, measured=capped.busbw)            # or record(p, reason="why nothing was measured")

``record`` prints one line (prediction, measurement, ratio, who predicted) and keeps the entry in
``results_dir()/predictions.json``, one entry per (lesson, name), so a rerun replaces its own
line. The file is JSON (nothing is unpickled), rewritten atomically (a temp file renamed over
it), and its read-merge-write runs under a file lock: two lessons recording at once must not
lose each other's entry, the lost update of lesson 07. ``calibration()`` reads a folder's
entries back for the capstone's table: how far the learner's numbers, and the lessons' models,
were from what was measured.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from labkit.course.results import results_dir
from labkit.errors import ParameterError

PREDICTIONS_FILE = "predictions.json"
SOURCES = ("learner", "model")


@dataclass
class Prediction:
    """One headline number: what was predicted and by whom, what was measured, their ratio."""

    lesson: str  # "03"
    name: str  # what is predicted, in words; with ``lesson`` the entry's key
    unit: str
    predicted: float | None  # the number the ratio is taken against
    source: str  # "learner" (the prediction cell) or "model" (the lesson's own model)
    model: float | None = None  # what the lesson's model says, kept beside a learner's number
    model_says: str = ""  # the model in words: its formula and where the lesson teaches it
    measured: float | None = None
    ratio: float | None = None  # measured / predicted: 1 is a perfect prediction
    model_ratio: float | None = None  # measured / model
    reason: str = ""  # why there is no measurement, or no ratio

    @property
    def key(self) -> tuple[str, str]:
        return self.lesson, self.name

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Prediction:
        known = {f.name for f in fields(cls)}
        missing = {"lesson", "name", "unit", "predicted", "source"} - set(data)
        if missing:
            raise ParameterError(f"a prediction entry lacks {sorted(missing)}: {data!r}")
        return cls(**{k: v for k, v in data.items() if k in known})


def _number(value: Any, what: str) -> float | None:
    """A finite float, or None; anything else is the learner's typo, said in words."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ParameterError(f"{what} must be a number (or None for the lesson's own model), "
                             f"not {value!r}")
    return float(value)


def resolve(learner: float | None, model: float | None, *, lesson: str, name: str, unit: str,
            model_says: str = "", variable: str = "the prediction") -> Prediction:
    """The learner's number when they wrote one, else the lesson's model's (``source`` says
    which). ``variable`` names the prediction cell's variable in the error for a non-number."""
    mine = _number(learner, variable)
    theirs = _number(model, f"the model's {name}")
    if mine is not None:
        return Prediction(lesson, name, unit, mine, "learner", theirs, model_says)
    return Prediction(lesson, name, unit, theirs, "model", theirs, model_says)


def _ratio(measured: float, predicted: float | None) -> float | None:
    if predicted is None:
        return None
    if predicted == 0:
        return 1.0 if measured == 0 else None  # 0 for 0 is exact; anything for 0 has no ratio
    return measured / predicted


def record(prediction: Prediction, measured: float | None = None, *, reason: str = "",
           folder: str | Path | None = None) -> Prediction:
    """Fill in the measurement and ratios, print one line, keep the entry in ``folder``
    (default: this run's results folder). A measurement that did not happen (None, or not a
    finite number) is kept as not measured, with ``reason``."""
    p = Prediction(**prediction.to_dict())
    value = measured
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                              or not math.isfinite(value)):
        reason = reason or f"the measurement was not a finite number ({value!r})"
        value = None
    if value is None:
        p.measured, p.ratio, p.model_ratio = None, None, None
        p.reason = reason or "no measurement in this run"
    else:
        p.measured = float(value)
        p.ratio, p.model_ratio = _ratio(p.measured, p.predicted), _ratio(p.measured, p.model)
        p.reason = reason
        if p.ratio is None:
            p.reason = p.reason or ("no ratio: the prediction was 0 and the measurement was not"
                                    if p.predicted is not None else "no prediction to compare with")
    print(describe(p), flush=True)
    _merge(p, Path(folder) if folder is not None else results_dir())
    return p


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _times(ratio: float) -> str:
    return f"{ratio:.2f}" if abs(ratio) >= 0.1 else f"{ratio:.2g}"


def describe(p: Prediction) -> str:
    """The one line ``record`` prints."""
    said = f" ({p.model_says})" if p.model_says else ""
    if p.source == "learner":
        head = f"your prediction {_fmt(p.predicted)} {p.unit}"
        model = f"the lesson's model said {_fmt(p.model)}{said}"
    else:
        head = f"the lesson's model predicted {_fmt(p.predicted)} {p.unit}{said}"
        model = ""
    line = f"[{p.lesson} prediction] {p.name}: {head}"
    if p.measured is None:
        return f"{line}; not measured: {p.reason}" + (f"; {model}" if model else "")
    ratio = "no ratio" if p.ratio is None else f"ratio {_times(p.ratio)} (measured / predicted)"
    line += f"; measured {_fmt(p.measured)} {p.unit}: {ratio}"
    if model:
        line += f"; {model}" + ("" if p.model_ratio is None else f", ratio {_times(p.model_ratio)}")
    return line


def _path(folder: Path) -> Path:
    return folder / PREDICTIONS_FILE


def load_predictions(folder: str | Path | None = None) -> list[Prediction]:
    """The entries kept in ``folder`` (default: this run's results folder), by lesson."""
    path = _path(Path(folder) if folder is not None else results_dir())
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
        entries = data["predictions"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise ParameterError(f"{path} is not a predictions file ({err}): move it aside") from err
    return [Prediction.from_dict(entry) for entry in entries]


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    with open(folder / f".{PREDICTIONS_FILE}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _merge(p: Prediction, folder: Path) -> Path:
    """Read, replace the entry with ``p``'s key, write to a temp file and rename it over."""
    folder.mkdir(parents=True, exist_ok=True)
    path = _path(folder)
    with _locked(folder):
        kept = {e.key: e for e in load_predictions(folder)}
        kept[p.key] = p
        entries = [kept[k].to_dict() for k in sorted(kept)]
        fd, tmp = tempfile.mkstemp(prefix=f".{PREDICTIONS_FILE}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w") as file:
                json.dump({"predictions": entries}, file, indent=2)
                file.write("\n")
                file.flush()
                os.fsync(file.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return path


def _abs_log2(ratio: float | None) -> float | None:
    return abs(math.log2(ratio)) if ratio is not None and ratio > 0 else None


@dataclass
class Calibration:
    """Every prediction kept in one results folder, and how far each source was off."""

    folder: Path
    entries: list[Prediction] = field(default_factory=list)

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per source: how many predictions, how many were measured with a ratio, and the median
        of |log2 ratio| (0: exact, 1: off by 2x either way) with the share within 2x. The
        learner's row covers their own numbers; the model's covers every entry, since the lesson
        computes its model's number even when the learner wrote one."""
        out = {}
        for source in SOURCES:
            if source == "learner":
                made = [e for e in self.entries if e.source == "learner"]
                logs = [_abs_log2(e.ratio) for e in made]
            else:
                made = [e for e in self.entries if e.model is not None]
                logs = [_abs_log2(e.model_ratio) for e in made]
            scored = [x for x in logs if x is not None]
            out[source] = {
                "predictions": len(made),
                "measured": sum(e.measured is not None for e in made),
                "with_ratio": len(scored),
                "median_abs_log2_ratio": statistics.median(scored) if scored else None,
                "within_2x": sum(x <= 1 for x in scored) / len(scored) if scored else None,
            }
        return out

    def table(self) -> str:
        """One line per prediction: lesson, what, predicted, by whom, measured, ratio."""
        from labkit.course.tables import format_table

        def measured(e: Prediction) -> str:
            return (f"{e.measured:.3g}" if e.measured is not None
                    else f"not measured: {e.reason}"[:60])

        return format_table(self.entries, [
            ("lesson", "lesson"), ("what", "name"), ("unit", "unit"),
            ("predicted", lambda e: _fmt(e.predicted)), ("by", "source"),
            ("measured", measured), ("ratio", lambda e: _fmt(e.ratio)),
            ("model", lambda e: _fmt(e.model)), ("model ratio", lambda e: _fmt(e.model_ratio)),
        ])

    def summary_lines(self) -> list[str]:
        lines = []
        for source, s in self.summary().items():
            who = "your predictions" if source == "learner" else "the lessons' models"
            if not s["predictions"]:
                lines.append(f"{who}: none in this folder")
                continue
            if s["median_abs_log2_ratio"] is None:
                lines.append(f"{who}: {s['predictions']}, none measured with a ratio")
                continue
            factor = 2 ** s["median_abs_log2_ratio"]
            lines.append(f"{who}: {s['predictions']}, {s['with_ratio']} measured with a ratio; "
                         f"median |log2 ratio| {s['median_abs_log2_ratio']:.2f} (typically off by "
                         f"{factor:.2f}x), {s['within_2x']:.0%} within 2x")
        return lines


def calibration(folder: str | Path | None = None) -> Calibration:
    """The predictions kept in ``folder`` (default: this run's results folder)."""
    where = Path(folder) if folder is not None else results_dir()
    return Calibration(where, load_predictions(where))
