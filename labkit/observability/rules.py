"""The alert rules: ``PairLatencyHigh`` (the guide's "alerts when communication latencies exceed
500us") and ``RankDown``, in Prometheus 2.x rule format (``promtool check rules`` accepts them).

``alert_rules()`` writes them for any threshold and ``for:`` window; ``RULES_FILE`` is the shipped
copy with the defaults.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from pathlib import Path

from labkit.errors import LabkitError, ServiceError
from labkit.services.prometheus import JOB_NAME, PROMETHEUS_FIX, prometheus_duration

RULES_FILE = Path(__file__).parent / "alerts" / "labkit.rules.yml"


"""The shipped rules: :func:`alert_rules` with its defaults (a test keeps them equal)."""


PAIR_LATENCY_THRESHOLD_S = 0.0005


"""The guide's alert threshold: communication latency above 500 us."""


ALERT_FOR_S = 5.0


"""How long a condition must hold before the alert fires: short for the lab (production: minutes)."""
MIN_EVALUATIONS = 5


_RULES_TEMPLATE = """\
# labkit's alert rules, Prometheus 2.x rule format (`promtool check rules` accepts them).
# Written by labkit.observability.observe.alert_rules(); this file is its output with the defaults.
# The `for:` windows are seconds so the lab sees an alert fire while the job runs; in
# production use minutes (for: 5m) so that one slow sample does not page anyone.
groups:
  - name: labkit
    rules:
      # The guide: "alerts when communication latencies exceed 500us" per GPU pair.
      # labkit_pair_latency_seconds{src,dst} is the one-way ping-pong latency src -> dst.
      - alert: PairLatencyHigh
        expr: labkit_pair_latency_seconds > @THRESHOLD@
        for: @FOR@
        labels:
          severity: warning
        annotations:
          summary: "Slow link: rank {{ $labels.src }} -> rank {{ $labels.dst }}"
          description: "One-way latency from rank {{ $labels.src }} to rank {{ $labels.dst }} is {{ $value | humanizeDuration }}, above @HUMAN@ for @FOR@."
      # A rank whose exporter stops answering: crashed, hung or cut off.
      - alert: RankDown
        expr: up{job="@JOB@"} == 0
        for: @FOR@
        labels:
          severity: critical
        annotations:
          summary: "Rank {{ $labels.rank }} ({{ $labels.instance }}) does not answer scrapes"
          description: "Prometheus could not scrape {{ $labels.instance }} for @FOR@."
"""


def evaluations_to_fire(for_s: float, evaluation_interval_s: float = 1.0) -> int:
    """Consecutive rule evaluations a condition needs to fire: one that makes it pending, then
    enough to cover ``for_s``."""
    return 1 + max(1, math.ceil(for_s / evaluation_interval_s - 1e-9))


def rule_window_s(for_s: float, evaluations: int = MIN_EVALUATIONS,
                  evaluation_interval_s: float = 1.0) -> float:
    """The shortest watch that gives a rule with ``for: for_s`` a fair chance: the evaluations
    it needs to fire, plus ``evaluations`` more."""
    return (evaluations_to_fire(for_s, evaluation_interval_s) + evaluations) * evaluation_interval_s


def human_seconds(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} us" if seconds < 1e-3 else f"{seconds * 1e3:.3g} ms"


def alert_rules(threshold_s: float = PAIR_LATENCY_THRESHOLD_S,
                for_s: float = ALERT_FOR_S) -> str:
    """The rules file text: ``PairLatencyHigh`` above ``threshold_s`` and ``RankDown``, each
    after ``for_s``. A parameter because the right threshold depends on the fabric."""
    if threshold_s <= 0:
        raise LabkitError(f"threshold must be positive, got {threshold_s} s")
    human = f"{threshold_s * 1e6:g}us" if threshold_s < 1e-3 else f"{threshold_s * 1e3:g}ms"
    return (_RULES_TEMPLATE.replace("@THRESHOLD@", f"{threshold_s:g}")
            .replace("@FOR@", prometheus_duration(for_s)).replace("@HUMAN@", human)
            .replace("@JOB@", JOB_NAME))


def check_rules(path: str | os.PathLike[str] = RULES_FILE) -> str:
    """Run ``promtool check rules PATH``; its output, or LabkitError saying what is wrong."""
    promtool = shutil.which("promtool")
    if promtool is None:
        raise ServiceError(f"promtool not found: {PROMETHEUS_FIX}")
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                          text=True, timeout=60)
    output = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        raise LabkitError(f"promtool rejects {path}:\n{output}")
    return output
