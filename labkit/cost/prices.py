"""Public list prices and hardware costs, each with its source and date (lesson 14).

The only prices in ``labkit.cost`` that are not the guide's or an assumption: on-demand list
prices read from the providers' pages (or a dated snapshot of them), and two published figures
for what H100 hardware costs to buy. ``choose_price`` turns the notebook's ``price_per_gpu_hour``
parameter into a price with its label; ``guide_vs_list`` puts the guide's implied prices next to
the list price of the instance each row names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from labkit.cost.guide_table import GUIDE_RUN_HOURS, GuideCost, load_guide_costs
from labkit.cost.money import GUIDE_H100_NVLINK_PRICE
from labkit.errors import ParameterError

# A snapshot of AWS's price list (on-demand, Linux, us-east-1), retrieved 2026-11-09
AWS_SNAPSHOT = ("https://raw.githubusercontent.com/datareceipts/data-receipts/main/"
                "109-gpu-pricing/hyperscalers.json")
AWS_PAGES = ("https://aws.amazon.com/ec2/instance-types/p4/",
             "https://aws.amazon.com/ec2/pricing/on-demand/")
LAMBDA_PAGE = "https://lambda.ai/pricing"
# Two dated transcriptions of Lambda's pricing page (2026-09-20 and 2026-09-25)
LAMBDA_TRANSCRIPTIONS = (
    "https://raw.githubusercontent.com/api-evangelist/lambda-labs/refs/heads/main/plans/"
    "lambda-labs-plans-pricing.yml",
    "https://raw.githubusercontent.com/tgarg01/silybench-data/main/derived/csv/gpu_prices.csv",
)


@dataclass(frozen=True)
class ListPrice:
    """One public on-demand price, as listed: per instance-hour or per GPU-hour."""

    key: str  # e.g. "aws-p4d", for choose_price and the notebook's parameter
    offer: str  # e.g. "AWS p4d.24xlarge"
    gpus: int  # GPUs in the instance the price is for
    gpu: str  # e.g. "A100 SXM 40 GB"
    usd: float  # the listed figure
    unit: str  # "instance-hour" or "GPU-hour"
    terms: str  # e.g. "on-demand, us-east-1"
    source: str  # where the figure was read
    as_of: str  # when: "2026-11-09", or "2026-09" for a month
    see_also: tuple[str, ...] = ()  # the provider's own pages, other transcriptions

    def __post_init__(self) -> None:
        if self.unit not in ("instance-hour", "GPU-hour"):
            raise ParameterError(f"unit must be 'instance-hour' or 'GPU-hour', not {self.unit!r}")
        if self.gpus < 1 or not math.isfinite(self.usd) or self.usd <= 0:
            raise ParameterError(f"{self.key}: gpus and usd must be positive")

    @property
    def per_gpu_hour(self) -> float:
        """Dollars per GPU-hour."""
        return self.usd / self.gpus if self.unit == "instance-hour" else self.usd

    @property
    def per_instance_hour(self) -> float:
        """Dollars per hour of the whole instance (all its GPUs)."""
        return self.usd if self.unit == "instance-hour" else self.usd * self.gpus


LIST_PRICES: tuple[ListPrice, ...] = (
    ListPrice("aws-p4d", "AWS p4d.24xlarge", 8, "A100 SXM 40 GB", 21.957642, "instance-hour",
              "on-demand, us-east-1", AWS_SNAPSHOT, "2026-11-09", AWS_PAGES),
    ListPrice("aws-p4de", "AWS p4de.24xlarge", 8, "A100 SXM 80 GB", 27.44705, "instance-hour",
              "on-demand, us-east-1", AWS_SNAPSHOT, "2026-11-09", AWS_PAGES),
    ListPrice("aws-p5", "AWS p5.48xlarge", 8, "H100 SXM 80 GB", 55.04, "instance-hour",
              "on-demand, us-east-1", AWS_SNAPSHOT, "2026-11-09", AWS_PAGES),
    ListPrice("lambda-h100-sxm", "Lambda 8x H100 SXM", 8, "H100 SXM 80 GB", 3.99, "GPU-hour",
              "on-demand", LAMBDA_PAGE, "2026-09", LAMBDA_TRANSCRIPTIONS),
    ListPrice("lambda-a100-80", "Lambda 8x A100 SXM 80 GB", 8, "A100 SXM 80 GB", 2.79,
              "GPU-hour", "on-demand", LAMBDA_PAGE, "2026-09", LAMBDA_TRANSCRIPTIONS),
    ListPrice("lambda-a100-40", "Lambda 8x A100 SXM 40 GB", 8, "A100 SXM 40 GB", 1.99,
              "GPU-hour", "on-demand", LAMBDA_PAGE, "2026-09", LAMBDA_TRANSCRIPTIONS),
)

_BY_KEY = {p.key: p for p in LIST_PRICES}

# The default price of lesson 14: the guide's cheapest row is Lambda's H100 on NVLink, and
# Lambda's listed H100 SXM machine is an NVLink one
DEFAULT_LIST_PRICE = _BY_KEY["lambda-h100-sxm"]


def list_price(key: str) -> ListPrice:
    """The row of ``LIST_PRICES`` with this key."""
    try:
        return _BY_KEY[key]
    except KeyError:
        raise ParameterError(f"no list price {key!r}; known: {', '.join(_BY_KEY)}") from None


@dataclass(frozen=True)
class PriceChoice:
    """A price per GPU-hour and where it comes from."""

    usd_per_gpu_hour: float
    kind: str  # "list", "guide" or "input"
    label: str  # one line for a learner
    source: str  # a URL, or "" for the guide's and your own
    as_of: str


def choose_price(value: float | str | None = None) -> PriceChoice:
    """The notebook's ``price_per_gpu_hour``: None is ``DEFAULT_LIST_PRICE``, "guide" the
    guide's implied H100 NVLink price, a key of ``LIST_PRICES`` that list price, a number
    your own price."""
    if value is None or (isinstance(value, str) and value in _BY_KEY):
        p = DEFAULT_LIST_PRICE if value is None else _BY_KEY[value]
        return PriceChoice(p.per_gpu_hour, "list",
                           f"{p.offer} ({p.gpu}), {p.terms}, list price as of {p.as_of}",
                           p.source, p.as_of)
    if value == "guide":
        return PriceChoice(GUIDE_H100_NVLINK_PRICE, "guide",
                           "the guide's implied H100 NVLink price: its Lambda row's $8,400 / "
                           f"(4 GPUs x {GUIDE_RUN_HOURS:g} h), derived, not quoted", "", "2026-03")
    if isinstance(value, str):
        raise ParameterError(f"price_per_gpu_hour {value!r}: use a number, None, 'guide' or "
                             f"one of {', '.join(_BY_KEY)}")
    price = float(value)
    if not math.isfinite(price) or price <= 0:
        raise ParameterError(f"price_per_gpu_hour must be positive, not {value!r}")
    return PriceChoice(price, "input", "this notebook's parameter price_per_gpu_hour (your input)",
                       "", "")


# Which list price each guide row is compared with, and why that one
GUIDE_ROW_LIST_PRICE = {
    "AWS p4d.24xlarge": ("aws-p4d", "the instance the row names"),
    "GCP a3-highgpu-8g": ("aws-p5", "no GCP price here: the same 8x H100 SXM on AWS"),
    "Lambda Labs": ("lambda-h100-sxm", "Lambda's H100 machine (SXM, NVLink)"),
    "AWS p4de.22xlarge x4": ("aws-p4de", "p4de.24xlarge, the instance the name must mean"),
}


@dataclass(frozen=True)
class PriceComparison:
    """A guide row's implied price (over the 72 h of its column header) against a list price."""

    configuration: str
    cloud_provider: str
    list_key: str
    why: str
    guide_per_gpu_hour: float
    list_per_gpu_hour: float
    list_per_instance_hour: float
    list_instance_gpus: int

    @property
    def per_gpu_ratio(self) -> float:
        """The guide's $/GPU-hour over the list $/GPU-hour."""
        return self.guide_per_gpu_hour / self.list_per_gpu_hour

    @property
    def vs_instance_rate(self) -> float:
        """The guide's $/GPU-hour over the list price of a whole instance-hour: near 1 when
        the total is an instance's hourly rate billed for every GPU."""
        return self.guide_per_gpu_hour / self.list_per_instance_hour


def guide_vs_list(rows: Sequence[GuideCost] | None = None) -> list[PriceComparison]:
    """Each guide row with a matching list price (``GUIDE_ROW_LIST_PRICE``) next to it."""
    rows = list(rows) if rows is not None else load_guide_costs()
    out = []
    for r in rows:
        if r.cloud_provider not in GUIDE_ROW_LIST_PRICE:
            continue
        key, why = GUIDE_ROW_LIST_PRICE[r.cloud_provider]
        p = _BY_KEY[key]
        out.append(PriceComparison(r.configuration, r.cloud_provider, key, why,
                                   r.price_per_gpu_hour("3 days"), p.per_gpu_hour,
                                   p.per_instance_hour, p.gpus))
    return out


@dataclass(frozen=True)
class CapexReference:
    """A published figure for what H100 hardware costs to buy."""

    what: str
    usd_low: float
    usd_high: float
    gpus: int  # GPUs the figure buys
    source: str
    as_of: str

    @property
    def per_gpu(self) -> tuple[float, float]:
        """(low, high) dollars per GPU."""
        return self.usd_low / self.gpus, self.usd_high / self.gpus


CAPEX_REFERENCES: tuple[CapexReference, ...] = (
    CapexReference("an 8x H100 SXM node, hardware (an estimate)", 300_000.0, 400_000.0, 8,
                   "https://www.technolynx.com/post/data-center-gpu-for-ai-workloads",
                   "2026-05-07"),
    CapexReference("one H100 GPU, MSRP (the GPU alone)", 30_000.0, 30_000.0, 1,
                   "https://huggingface.co/hardware/h100", "no date on the page"),
)
