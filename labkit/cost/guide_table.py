"""The guide's cost table as data, checked against itself (lesson 14).

``load_guide_costs()`` reads ``data/guide_costs.csv`` (the guide's figures, as the guide gives them:
"our AWS and GCP invoices for March 2026"); ``guide_cost_checks(rows)`` recomputes what the table
implies (3-day cost vs wall time, $/GPU-hour, the guide's "22%" claim) from its own rows, and
sets its instance names against what the providers say those instances are (``INSTANCE_FACTS``).
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.errors import ParameterError

GUIDE_COSTS_CSV = Path(__file__).resolve().parents[2] / "data" / "guide_costs.csv"

GUIDE_COST_COLUMNS = ("configuration", "cloud_provider", "cost_3_days_usd", "wall_time_hours",
                      "notes", "source", "as_of")

GUIDE_RUN_HOURS = 72.0  # the guide: "a 3-day training run", column "Cost (3 days)"


@dataclass(frozen=True)
class GuideCost:
    """One row of the guide's cost table, as the guide gives it (its invoices, not ours)."""

    configuration: str  # e.g. "8x A100 80GB (NVLink)"
    cloud_provider: str  # e.g. "AWS p4d.24xlarge", as the guide spells it
    cost_3_days_usd: float  # the column "Cost (3 days)"
    wall_time_hours: float  # the column "Wall Time"
    notes: str
    source: str  # "guide"
    as_of: str  # "2026-03": the guide's "invoices for March 2026"

    def __post_init__(self) -> None:
        if not _CONFIG_RE.match(self.configuration):
            raise ParameterError(f"configuration {self.configuration!r} does not start with a "
                                 "GPU count like '8x A100 80GB'")

    @property
    def n_gpus(self) -> int:
        """GPU count from the configuration ("32x A100 ..." -> 32)."""
        return int(_CONFIG_RE.match(self.configuration).group(1))

    @property
    def gpu(self) -> str:
        """The GPU model from the configuration ("8x A100 80GB (NVLink)" -> "A100 80GB")."""
        return _CONFIG_RE.match(self.configuration).group(2).strip()

    def price_per_gpu_hour(self, basis: str = "3 days") -> float:
        """The guide's cost divided by GPU-hours: over the 72 h the column header names
        (``basis="3 days"``) or over the row's own wall time (``basis="wall time"``). The guide
        gives no hourly prices; these are derived from its totals, and the two bases differ
        because its wall times are not 72 h."""
        hours = {"3 days": GUIDE_RUN_HOURS, "wall time": self.wall_time_hours}.get(basis)
        if hours is None:
            raise ParameterError(f"basis must be '3 days' or 'wall time', not {basis!r}")
        return self.cost_3_days_usd / (self.n_gpus * hours)


_CONFIG_RE = re.compile(r"^(\d+)x\s+([^()]+?)\s*(\(.*\))?$")

_AS_OF_RE = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")


def load_guide_costs(path: str | Path = GUIDE_COSTS_CSV) -> list[GuideCost]:
    """Read ``data/guide_costs.csv`` (schema in ``data/README.md``); a malformed file raises
    ParameterError naming the file, the line and what is wrong with it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ParameterError(f"cannot read the cost table {path}: {err}") from err
    reader = csv.DictReader(io.StringIO(text), restkey="_extra")
    header = tuple(reader.fieldnames or ())
    if header != GUIDE_COST_COLUMNS:
        raise ParameterError(f"{path.name} line 1: columns must be {','.join(GUIDE_COST_COLUMNS)}; "
                             f"found {','.join(header) or 'nothing'}")
    rows = []
    for raw in reader:
        where = f"{path.name} line {reader.line_num}"
        if raw.get("_extra"):
            raise ParameterError(f"{where}: {len(header) + len(raw['_extra'])} fields, "
                                 f"expected {len(header)} (a comma inside a value needs quotes)")
        missing = [c for c in header if raw.get(c) is None]
        if missing:
            raise ParameterError(f"{where}: missing {', '.join(missing)} "
                                 f"(expected {len(header)} fields)")
        values: dict[str, Any] = {c: raw[c].strip() for c in header}
        for col in ("cost_3_days_usd", "wall_time_hours"):
            try:
                values[col] = float(values[col])
            except ValueError:
                raise ParameterError(f"{where}: {col} {values[col]!r} is not a number "
                                     "(write 19200, not $19,200)") from None
            if not math.isfinite(values[col]) or values[col] <= 0:
                raise ParameterError(f"{where}: {col} must be a positive number, "
                                     f"not {values[col]}")
        if not _CONFIG_RE.match(values["configuration"]):
            raise ParameterError(f"{where}: configuration {values['configuration']!r} does not "
                                 "start with a GPU count like '8x A100 80GB'")
        if not _AS_OF_RE.match(values["as_of"]):
            raise ParameterError(f"{where}: as_of {values['as_of']!r} is not YYYY-MM")
        for col in ("cloud_provider", "source"):
            if not values[col]:
                raise ParameterError(f"{where}: {col} is empty")
        rows.append(GuideCost(**values))
    if not rows:
        raise ParameterError(f"{path.name}: no rows after the header")
    return rows


@dataclass(frozen=True)
class InstanceFact:
    """What a cloud instance type is, from its provider's own page."""

    name: str  # e.g. "p4d.24xlarge"
    provider: str
    gpus: int
    gpu: str  # e.g. "A100"
    gpu_memory_gb: int
    form: str  # "SXM" or "PCIe"
    interconnect: str  # between the instance's GPUs
    source: str


AWS_P4_PAGE = "https://aws.amazon.com/ec2/instance-types/p4/"
GCP_A3_PAGE = "https://cloud.google.com/compute/docs/accelerator-optimized-machines#a3-vms"

# AWS's P4 page: p4d.24xlarge has 8 A100 40 GB, p4de.24xlarge 8 A100 80 GB, both with a 600 GB/s
# NVSwitch GPU interconnect; there is no other P4 size. GCP's page: A3 High machine types have
# NVIDIA H100 80GB SXM GPUs linked by NVLink/NVSwitch, a3-highgpu-8g eight of them.
INSTANCE_FACTS: tuple[InstanceFact, ...] = (
    InstanceFact("p4d.24xlarge", "AWS", 8, "A100", 40, "SXM", "NVLink/NVSwitch", AWS_P4_PAGE),
    InstanceFact("p4de.24xlarge", "AWS", 8, "A100", 80, "SXM", "NVLink/NVSwitch", AWS_P4_PAGE),
    InstanceFact("a3-highgpu-8g", "GCP", 8, "H100", 80, "SXM", "NVLink/NVSwitch", GCP_A3_PAGE),
)

_INSTANCE_RE = re.compile(r"\b([a-z][a-z0-9]*(?:\.\d*x?large|-[a-z0-9-]+))(?:\s+x(\d+))?")


def _family(name: str) -> str:
    return name.split(".")[0]


def instance_fact(row: GuideCost) -> tuple[str, int, InstanceFact | None]:
    """The instance name in a row's provider (``"AWS p4de.22xlarge x4"`` -> ``p4de.22xlarge``),
    how many of it, and the ``INSTANCE_FACTS`` entry it names; a name that does not exist gets
    its family's one instance. ("", 1, None) when the row names no instance."""
    found = _INSTANCE_RE.search(row.cloud_provider)
    if not found:
        return "", 1, None
    name, count = found.group(1), int(found.group(2) or 1)
    exact = [f for f in INSTANCE_FACTS if f.name == name]
    family = [f for f in INSTANCE_FACTS if _family(f.name) == _family(name)]
    fact = exact[0] if exact else family[0] if len(family) == 1 else None
    return name, count, fact


def instance_mismatches(row: GuideCost) -> list[str]:
    """Where the row's instance name contradicts its own GPU and interconnect labels."""
    name, count, fact = instance_fact(row)
    if fact is None:
        return []
    out = []
    if fact.name != name:
        out.append(f"{name} does not exist on {fact.provider} (the {_family(name)} family's one "
                   f"instance is {fact.name}, {fact.gpus}x {fact.gpu} {fact.form} "
                   f"{fact.gpu_memory_gb} GB)")
    if fact.gpu not in row.gpu:
        out.append(f"{fact.name} has {fact.gpu} GPUs, not {row.gpu}")
    label_gb = re.search(r"(\d+)\s*GB", row.gpu)
    if label_gb and int(label_gb.group(1)) != fact.gpu_memory_gb:
        other = [f.name for f in INSTANCE_FACTS if f.gpu == fact.gpu
                 and f.gpu_memory_gb == int(label_gb.group(1))]
        out.append(f"{fact.name} has {fact.gpus}x {fact.gpu} {fact.gpu_memory_gb} GB, not "
                   f"{label_gb.group(1)} GB" + (f" (the {label_gb.group(1)} GB one is {other[0]})"
                                                 if other else ""))
    if "pcie" in row.configuration.lower() and fact.form != "PCIe":
        out.append(f"{fact.name} is {fact.gpu} {fact.form} on {fact.interconnect}, not PCIe")
    if row.n_gpus != count * fact.gpus:
        out.append(f"{count} x {fact.name} is {count * fact.gpus} GPUs, not {row.n_gpus}")
    return out


@dataclass(frozen=True)
class GuideCheck:
    """One of the guide's statements about its table, next to what its own numbers give
    (or, with ``sources``, what the providers' pages say)."""

    topic: str
    guide_says: str
    its_numbers_give: str
    sources: tuple[str, ...] = ()


def guide_cost_checks(rows: Sequence[GuideCost] | None = None) -> list[GuideCheck]:
    """Arithmetic on the guide's own table: where its figures and its prose disagree, and
    where its instance names contradict its labels (``INSTANCE_FACTS``, with sources). No
    price here is one we looked up."""
    rows = list(rows) if rows is not None else load_guide_costs()
    by = {r.configuration: r for r in rows}
    checks = []
    odd = [r for r in rows if r.wall_time_hours != GUIDE_RUN_HOURS]
    if odd:
        checks.append(GuideCheck(
            "3-day cost vs wall time", "'Cost (3 days)' for 'a 3-day training run'",
            "wall times of " + ", ".join(f"{r.wall_time_hours:g} h ({r.configuration})" for r in odd)
            + ": the cost column cannot be both 3 days and what each run took"))
    checks.append(GuideCheck(
        "implied price per GPU-hour", "(no hourly prices given)",
        "; ".join(f"{r.configuration} on {r.cloud_provider}: ${r.price_per_gpu_hour('3 days'):.2f} "
                  "over 72 h" + ("" if r.wall_time_hours == GUIDE_RUN_HOURS else
                                 f", ${r.price_per_gpu_hour('wall time'):.2f} over "
                                 f"{r.wall_time_hours:g} h")
                  for r in rows)))
    wrong = {r.configuration: instance_mismatches(r) for r in rows}
    if any(wrong.values()):
        checks.append(GuideCheck(
            "instance names vs labels",
            "; ".join(f"{r.configuration} on {r.cloud_provider}" for r in rows if wrong[r.configuration]),
            "the table's own instance names contradict its GPU and interconnect labels: "
            + "; ".join(m for r in rows for m in wrong[r.configuration]),
            tuple(sorted({instance_fact(r)[2].source for r in rows if wrong[r.configuration]}))))
    a8, a32 = by.get("8x A100 80GB (NVLink)"), by.get("32x A100 80GB (cluster)")
    if a8 and a32:
        checks.append(GuideCheck(
            "the 32-GPU row", "'Only if you need scale'",
            f"${a32.cost_3_days_usd:,.0f} = {a32.cost_3_days_usd / a8.cost_3_days_usd:g} x the "
            f"8-GPU row: ${a32.price_per_gpu_hour('3 days'):.2f}/GPU-h over 72 h, like the 8-GPU "
            f"row's ${a8.price_per_gpu_hour('3 days'):.2f}, though it ran {a32.wall_time_hours:g} h; "
            f"speed-up {a8.wall_time_hours / a32.wall_time_hours:.2f}x on "
            f"{a32.n_gpus // a8.n_gpus}x the GPUs (efficiency "
            f"{a8.wall_time_hours * a8.n_gpus / (a32.wall_time_hours * a32.n_gpus):.0%})"))
    lam = by.get("4x H100 80GB (NVLink)")
    if a8 and lam:
        checks.append(GuideCheck(
            "Lambda vs AWS", "'Lambda Labs was 56% cheaper than AWS'",
            f"per run 1 - {lam.cost_3_days_usd:,.0f}/{a8.cost_3_days_usd:,.0f} = "
            f"{1 - lam.cost_3_days_usd / a8.cost_3_days_usd:.2%} (right), but with half the GPUs "
            f"and {lam.wall_time_hours:g} h instead of {a8.wall_time_hours:g} h; per GPU-hour "
            f"{1 - lam.price_per_gpu_hour('3 days') / a8.price_per_gpu_hour('3 days'):.1%} cheaper "
            f"over 72 h, {1 - lam.price_per_gpu_hour('wall time') / a8.price_per_gpu_hour('wall time'):.1%}"
            " over each run's wall time"))
    h8 = by.get("8x H100 80GB (PCIe)")
    if a8 and h8:
        name, _, fact = instance_fact(h8)
        a8_fact = instance_fact(a8)[2]
        nvlink = fact is not None and fact.form != "PCIe"
        both = nvlink and a8_fact is not None and a8_fact.form != "PCIe"
        checks.append(GuideCheck(
            "A100 NVLink vs H100 PCIe", "'A100s with NVLink outperformed H100s on PCIe ... by 22%'",
            f"in the table the row labelled H100 PCIe finished first: {h8.wall_time_hours:g} h vs "
            f"{a8.wall_time_hours:g} h ({1 - h8.wall_time_hours / a8.wall_time_hours:.0%} less "
            f"time; the A100 run took {a8.wall_time_hours / h8.wall_time_hours - 1:.0%} longer)"
            + (f"; and by its instance name ({name}) that row is {fact.gpu} {fact.form} on "
               f"{fact.interconnect}: an NVLink machine"
               + (f" like the A100 row's {a8_fact.name}, so the table's two rows cannot show "
                  "NVLink against PCIe" if both else "") if nvlink else ""),
            tuple(sorted({f.source for f in (fact, a8_fact) if f is not None})) if nvlink else ()))
    return checks
