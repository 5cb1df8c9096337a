"""The corpus of real NCCL / torch.distributed configs in tests/data/nccl_configs, and how a
checker scores on it (no tests here; tests/test_nccl_corpus.py uses it).

    from nccl_corpus import default_check, load_corpus, score
    figures = score(default_check)
    print(figures.summary())

``check(text) -> findings``: anything with ``severity`` ("error"/"warning"/"info"), ``variable``
and ``message`` (attributes or dict keys), like ``labkit.nccl.findings.Finding``. Each manifest
entry says which problems the thread (or NCCL's / PyTorch's own docs and source) established
(``expected``), and which variables are fine on some host and must never be an error
(``not_error``). The manifest's ``documented_variables`` are names that NCCL's env docs, torch
2.13's ProcessGroupNCCL.hpp, or a vendor plugin's docs/source define: a checker must not call
them unknown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CORPUS_DIR = Path(__file__).resolve().parent / "data" / "nccl_configs"
MANIFEST = CORPUS_DIR / "manifest.json"
RANK = {"info": 0, "warning": 1, "error": 2}
# Names a parser must not invent: a value for one of these that the manifest does not list is a
# phantom (read from a comment, an ``unset``, a value, ...).
WATCHED_PREFIXES = ("NCCL_", "TORCH_", "GLOO_", "FI_", "OFI_NCCL_")
# How today's checker (and, we assume, its successors) words "I don't know this variable".
UNKNOWN_MESSAGE = re.compile(r"not a (known )?variable|unknown variable|not (a )?known|"
                             r"unrecognized|no such variable", re.IGNORECASE)


@dataclass(frozen=True)
class Expected:
    """One problem the thread or the primary docs established: a finding of at least ``at_least``
    on one of ``variables`` (whose message matches ``match``, when given) flags it."""

    variables: tuple[str, ...]
    at_least: str
    why: str
    match: str | None = None

    def flagged_by(self, finding: Finding) -> bool:
        return (finding.variable in self.variables and RANK[finding.severity] >= RANK["warning"]
                and (self.match is None or re.search(self.match, finding.message, re.I) is not None))

    def label(self) -> str:
        return "|".join(self.variables) + (f" ~/{self.match}/" if self.match else "")


@dataclass(frozen=True)
class Entry:
    """One real config: its text exactly as pasted, where it comes from, what it means."""

    file: str
    text: str
    source: str
    date: str | None
    shape: str
    env: dict[str, str]
    thread_says: str
    expected: tuple[Expected, ...]
    not_error: frozenset[str]
    note: str | None = None

    @property
    def problem_variables(self) -> frozenset[str]:
        """Variables the manifest marks as a real problem (an error on one of them is right)."""
        return frozenset(v for item in self.expected for v in item.variables)


@dataclass(frozen=True)
class Finding:
    """The part of a checker's finding the score looks at."""

    severity: str
    variable: str
    message: str


@dataclass
class EntryResult:
    entry: Entry
    findings: list[Finding]
    errors: list[Finding] = field(default_factory=list)
    right_errors: list[Finding] = field(default_factory=list)
    false_errors: list[Finding] = field(default_factory=list)  # on a not_error variable
    flagged: list[Expected] = field(default_factory=list)
    missed: list[Expected] = field(default_factory=list)
    below_level: list[Expected] = field(default_factory=list)  # flagged, but under at_least
    unknown_documented: list[Finding] = field(default_factory=list)
    crashed: str | None = None  # the exception, when the checker raised

    def problems(self) -> list[str]:
        """What is wrong with the checker on this entry, one line each (empty: all good)."""
        out = [f"raised {self.crashed}"] if self.crashed else []
        out += [f"missed {item.label()}: {item.why}" for item in self.missed]
        out += [f"only a warning for {item.label()} (needs an error)" for item in self.below_level]
        out += [f"false error on {f.variable}: {f.message}" for f in self.false_errors]
        out += [f"documented variable called unknown: {f.variable}"
                for f in self.unknown_documented]
        return out


@dataclass
class Score:
    """Corpus figures for one checker (the task's "done when" figures)."""

    results: list[EntryResult]

    @property
    def errors(self) -> int:
        return sum(len(r.errors) for r in self.results)

    @property
    def errors_right(self) -> int:
        return sum(len(r.right_errors) for r in self.results)

    @property
    def diagnosed(self) -> int:
        return sum(len(r.entry.expected) for r in self.results)

    @property
    def diagnosed_flagged(self) -> int:
        return sum(len(r.flagged) for r in self.results)

    @property
    def false_errors(self) -> int:
        return sum(len(r.false_errors) for r in self.results)

    @property
    def unknown_documented(self) -> set[str]:
        return {f.variable for r in self.results for f in r.unknown_documented}

    @property
    def configs_failing(self) -> int:
        """Configs that would exit 1 (at least one error)."""
        return sum(1 for r in self.results if r.errors)

    @property
    def configs_failing_wrongly(self) -> int:
        """Configs that would exit 1 although none of their errors is right."""
        return sum(1 for r in self.results if r.errors and not r.right_errors)

    @property
    def crashed(self) -> list[str]:
        return [f"{r.entry.file}: {r.crashed}" for r in self.results if r.crashed]

    @property
    def errors_right_ratio(self) -> float:
        return self.errors_right / self.errors if self.errors else 1.0

    @property
    def flagged_ratio(self) -> float:
        return self.diagnosed_flagged / self.diagnosed if self.diagnosed else 1.0

    def summary(self) -> str:
        findings = sum(len(r.findings) for r in self.results)
        unknown = ", ".join(sorted(self.unknown_documented)) or "none"
        return (f"{len(self.results)} configs, {findings} findings; errors right "
                f"{self.errors_right}/{self.errors} ({self.errors_right_ratio:.0%}); diagnosed "
                f"problems flagged {self.diagnosed_flagged}/{self.diagnosed} "
                f"({self.flagged_ratio:.0%}); false errors on not_error variables "
                f"{self.false_errors}; exit 1 on {self.configs_failing} configs "
                f"({self.configs_failing_wrongly} with no right error); documented variables "
                f"called unknown: {unknown}; crashes: {len(self.crashed)}")


def load_corpus(manifest: Path = MANIFEST) -> list[Entry]:
    """Every entry of the manifest, with its file's text (read as UTF-8, newlines untouched)."""
    data = json.loads(manifest.read_text(encoding="utf-8"))
    entries = []
    for raw in data["entries"]:
        expected = tuple(
            Expected(tuple(item["variable"]) if isinstance(item["variable"], list)
                     else (item["variable"],), item["at_least"], item["why"], item.get("match"))
            for item in raw["expected"])
        text = (manifest.parent / raw["file"]).read_bytes().decode("utf-8")
        entries.append(Entry(raw["file"], text, raw["source"], raw.get("date"), raw["shape"],
                             dict(raw["env"]), raw["thread_says"], expected,
                             frozenset(raw["not_error"]), raw.get("note")))
    return entries


def documented_variables(manifest: Path = MANIFEST) -> dict[str, str]:
    """Documented variable name -> where it is documented."""
    return dict(json.loads(manifest.read_text(encoding="utf-8"))["documented_variables"])


def read_env(text: str) -> dict[str, str]:
    """What ``labkit.nccl.envfile.parse_env_file`` reads from ``text``, as a plain dict (it may
    return a mapping, or a result object with an ``env`` mapping)."""
    from labkit.nccl.envfile import parse_env_file

    parsed: Any = parse_env_file(text)
    if not isinstance(parsed, Mapping):
        parsed = parsed.env
    return dict(parsed)


def default_check(text: str) -> list[Any]:
    """The checker as the CLI runs it on a file: read the text, check what was read."""
    from labkit.nccl.check import check_env
    from labkit.nccl.paste import parse_env

    return check_env(read_env(text), **parse_env(text).job)


def phantoms(entry: Entry, env: Mapping[str, str]) -> dict[str, str]:
    """Watched variables a reader got that the manifest does not list for ``entry``."""
    return {k: v for k, v in env.items() if k.startswith(WATCHED_PREFIXES) and k not in entry.env}


def as_finding(obj: Any) -> Finding:
    get = obj.get if isinstance(obj, Mapping) else lambda name: getattr(obj, name)
    return Finding(str(get("severity")), str(get("variable")), str(get("message")))


def is_unknown(finding: Finding) -> bool:
    return bool(UNKNOWN_MESSAGE.search(finding.message))


def evaluate(entry: Entry, check: Callable[[str], Iterable[Any]],
             documented: Mapping[str, str] | None = None,
             unknown: Callable[[Finding], bool] = is_unknown) -> EntryResult:
    """How ``check`` does on one entry."""
    documented = documented_variables() if documented is None else documented
    try:
        findings = [as_finding(f) for f in check(entry.text)]
    except Exception as exc:  # a crash is a result to report, not a reason to stop scoring
        return EntryResult(entry, [], missed=list(entry.expected), crashed=repr(exc))
    result = EntryResult(entry, findings)
    result.errors = [f for f in findings if f.severity == "error"]
    result.right_errors = [f for f in result.errors if f.variable in entry.problem_variables]
    result.false_errors = [f for f in result.errors if f.variable in entry.not_error]
    for item in entry.expected:
        hits = [f for f in findings if item.flagged_by(f)]
        if not hits:
            result.missed.append(item)
            continue
        result.flagged.append(item)
        if item.at_least == "error" and not any(f.severity == "error" for f in hits):
            result.below_level.append(item)
    result.unknown_documented = [f for f in findings if f.variable in documented and unknown(f)]
    return result


def score(check: Callable[[str], Iterable[Any]], entries: list[Entry] | None = None,
          unknown: Callable[[Finding], bool] = is_unknown) -> Score:
    """The corpus figures for ``check`` (``check(text) -> findings``)."""
    documented = documented_variables()
    entries = load_corpus() if entries is None else entries
    return Score([evaluate(e, check, documented, unknown) for e in entries])
