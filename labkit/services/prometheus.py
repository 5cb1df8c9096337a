"""A real Prometheus on loopback: the ``prometheus`` binary with a generated config, a free port
and its TSDB in a temp dir; ``query``, ``alerts`` and ``targets`` over its HTTP API.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.errors import ParameterError, ServiceError
from labkit.services.base import HOST, ManagedServer

JOB_NAME = "labkit"  # the scrape job; RankDown watches up{job="labkit"}

PROMETHEUS_FIX = ("install it with `apt-get install prometheus` (Debian/Ubuntu; ships prometheus "
                  "and promtool) or put a Prometheus 2.x release's binary on PATH")


def prometheus_duration(seconds: float) -> str:
    """A Prometheus duration: whole milliseconds ("5s", "1500ms")."""
    ms = round(seconds * 1000)
    if ms <= 0:
        raise ParameterError(f"a Prometheus duration must be positive, got {seconds} s")
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


@dataclass(frozen=True)
class ScrapeTarget:
    """One endpoint Prometheus scrapes, with the labels it adds to every series from it."""

    address: str  # "127.0.0.1:PORT"
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(eq=False)
class PrometheusServer(ManagedServer):
    """A private ``prometheus`` on 127.0.0.1: free port, generated config, TSDB in a temp dir.

    ``with PrometheusServer(targets=[...]) as prom: prom.query("up")``. Scrapes and evaluates
    rules every second (the lab's pace), stores nothing outside its temp dir, talks to no
    remote storage or Alertmanager: alerts are read from its own API (``alerts()``).
    """

    targets: Sequence[ScrapeTarget | str] = ()
    rule_files: Sequence[str | os.PathLike[str]] = ()  # rule files to load, e.g. observability's RULES_FILE
    scrape_interval_s: float = 1.0
    evaluation_interval_s: float = 1.0
    startup_timeout: float = 30.0

    name = "prometheus"
    fix = PROMETHEUS_FIX
    _tmp_prefix = "labkit-prometheus-"
    _log_name = "prometheus.log"  # it logs to stderr: stdout.log has it

    @staticmethod
    def available() -> tuple[bool, str]:
        """(True, binary path) when a prometheus binary is on PATH, else (False, how to get
        one)."""
        found = shutil.which("prometheus")
        return (True, found) if found else (False, f"prometheus not found: {PROMETHEUS_FIX}")

    def start(self) -> PrometheusServer:
        super().start()
        return self

    def __enter__(self) -> PrometheusServer:
        return self.start()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (the web UI and API; no credentials)."""
        return f"http://{HOST}:{self._port}"

    def config(self) -> dict[str, Any]:
        """The prometheus.yml this server runs with (as a dict)."""
        targets = [t if isinstance(t, ScrapeTarget) else ScrapeTarget(t) for t in self.targets]
        interval = prometheus_duration(self.scrape_interval_s)
        return {
            "global": {"scrape_interval": interval, "scrape_timeout": interval,
                       "evaluation_interval": prometheus_duration(self.evaluation_interval_s)},
            "rule_files": [str(Path(p).resolve()) for p in self.rule_files],
            "scrape_configs": [{
                "job_name": JOB_NAME,
                "static_configs": [{"targets": [t.address], "labels": dict(t.labels)}
                                   for t in targets],
            }],
        }

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Evaluate PromQL now (``/api/v1/query``): the result list (``metric``, ``value``)."""
        return self._api("query", {"query": expr})["result"]

    def query_range(self, expr: str, start: float, end: float, step_s: float = 1.0
                    ) -> list[dict[str, Any]]:
        """Evaluate PromQL over ``[start, end]`` (unix seconds) every ``step_s``
        (``/api/v1/query_range``): the result list (``metric``, ``values`` as [t, "v"] pairs)."""
        return self._api("query_range", {"query": expr, "start": f"{start:.3f}",
                                         "end": f"{end:.3f}", "step": f"{step_s:g}"})["result"]

    def alerts(self) -> list[dict[str, Any]]:
        """Pending and firing alerts (``/api/v1/alerts``): labels, annotations, state, ..."""
        return self._api("alerts")["alerts"]

    def targets_health(self) -> list[dict[str, Any]]:
        """Active scrape targets (``/api/v1/targets``): labels, scrapeUrl, health, lastError."""
        return self._api("targets")["activeTargets"]

    def rule_evaluations(self) -> int:
        """Rule group evaluations done so far, over all groups (from the server's own
        ``/metrics``: scheduled iterations minus missed ones). Each rule in a group is
        evaluated once per group evaluation."""
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        counts = {"prometheus_rule_group_iterations_total": 0.0,
                  "prometheus_rule_group_iterations_missed_total": 0.0}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in counts:
                    counts[sample.name] += float(sample.value)
        return int(counts["prometheus_rule_group_iterations_total"]
                   - counts["prometheus_rule_group_iterations_missed_total"])

    # Internals.
    def _api(self, path: str, params: dict[str, str] | None = None) -> Any:
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                body = json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise ServiceError(f"prometheus {path}: HTTP {exc.code}: {detail}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise ServiceError(f"prometheus at {self.url} did not answer: {exc}") from exc
        if body.get("status") != "success":
            raise ServiceError(f"prometheus {path}: {body.get('error', body)}")
        return body["data"]

    def _default_binary(self) -> Path | None:
        found = shutil.which("prometheus")
        return Path(found) if found else None

    def _write_config(self, tmpdir: Path, port: int) -> list[str]:
        import yaml

        config = tmpdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        return [f"--config.file={config}", f"--storage.tsdb.path={tmpdir / 'data'}",
                f"--web.listen-address={HOST}:{port}", "--storage.tsdb.retention.time=1h",
                "--log.level=warn"]

    def _ping(self, port: int) -> bool:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}/-/ready", timeout=0.5) as reply:
                return reply.status == 200
        except (urllib.error.URLError, OSError):
            return False
