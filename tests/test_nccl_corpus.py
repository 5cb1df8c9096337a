"""labkit nccl check on real configs (tests/data/nccl_configs): the parser reads what each one
sets, the checker flags what its thread or NCCL's / PyTorch's docs established, never errors on
what is fine on some host, and the corpus figures meet the checker's bar; the held-out sets
(nccl_configs_heldout to nccl_configs_heldout13, each scored once, blind, before the checker
saw it) stay there too."""

from __future__ import annotations

import json
import re

import pytest
from nccl_corpus import (
    CORPUS_DIR,
    MANIFEST,
    RANK,
    WATCHED_PREFIXES,
    Score,
    default_check,
    documented_variables,
    evaluate,
    load_corpus,
    phantoms,
    read_env,
    score,
)

ENTRIES = load_corpus()
IDS = [e.file.removesuffix(".txt") for e in ENTRIES]
URL = re.compile(r"https://\S+")


# --- the corpus itself -------------------------------------------------------------------------

def test_corpus_is_big_enough_and_every_file_is_listed():
    assert len(ENTRIES) >= 30
    listed = {e.file for e in ENTRIES}
    on_disk = {p.name for p in CORPUS_DIR.glob("*.txt")}
    assert listed == on_disk
    assert len(listed) == len(ENTRIES), "a file is listed twice"


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_entry_is_well_formed(entry):
    assert re.fullmatch(r"\d\d_[a-z0-9_]+\.txt", entry.file)
    assert entry.source.startswith("https://")
    assert entry.shape and entry.thread_says and entry.env
    assert entry.date is None or re.fullmatch(r"\d{4}-\d\d-\d\d", entry.date)
    for item in entry.expected:
        assert item.at_least in ("warning", "error")
        assert URL.search(item.why), f"{item.label()}: 'why' must cite its source"
        assert set(item.variables) <= set(entry.env), "expected on a variable the text sets"
    assert entry.not_error <= set(entry.env)
    assert not entry.not_error & entry.problem_variables


def test_documented_variables_cite_a_source():
    documented = documented_variables()
    assert documented and all(URL.fullmatch(url) for url in documented.values())
    raw = json.loads(MANIFEST.read_text(encoding="utf-8"))
    assert set(raw) == {"about", "documented_variables", "entries"}


# --- the parser --------------------------------------------------------------------------------

@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_parser_reads_what_the_config_sets(entry):
    env = read_env(entry.text)
    wrong = {k: (env.get(k), v) for k, v in entry.env.items() if env.get(k) != v}
    assert not wrong, f"{entry.shape}: (read, expected) {wrong}"
    extra = phantoms(entry, env)
    assert not extra, f"read variables the text does not set ({WATCHED_PREFIXES}): {extra}"


# --- the checker, entry by entry ---------------------------------------------------------------

@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_checker_findings_on_config(entry):
    result = evaluate(entry, default_check)
    assert not result.problems(), "\n".join(
        [f"{entry.file} ({entry.source}):"] + result.problems() + ["findings:"]
        + [f"  {f.severity} {f.variable}: {f.message}"
           for f in sorted(result.findings, key=lambda f: -RANK.get(f.severity, 0))])


# --- the figures the checker is held to --------------------------------------------------------------

def test_corpus_figures_meet_the_bar():
    figures = score(default_check)
    summary = figures.summary()
    assert not figures.crashed, summary
    assert figures.errors_right_ratio >= 0.95, summary
    assert figures.flagged_ratio >= 0.90, summary
    assert len(figures.unknown_documented) <= 2, summary


HELD_OUT = [CORPUS_DIR.parent / name / "manifest.json"
            for name in ("nccl_configs_heldout", "nccl_configs_heldout2", "nccl_configs_heldout3",
                         "nccl_configs_heldout4", "nccl_configs_heldout5",
                         "nccl_configs_heldout6", "nccl_configs_heldout7",
                         "nccl_configs_heldout8", "nccl_configs_heldout9",
                         "nccl_configs_heldout10", "nccl_configs_heldout11",
                         "nccl_configs_heldout12", "nccl_configs_heldout13",
                         "nccl_configs_heldout14", "nccl_configs_heldout15")]


@pytest.mark.parametrize("manifest", HELD_OUT, ids=lambda p: p.parent.name)
def test_held_out_figures_meet_the_bar(manifest):
    documented = {**documented_variables(), **documented_variables(manifest)}
    entries = load_corpus(manifest)
    figures = Score([evaluate(e, default_check, documented) for e in entries])
    summary = figures.summary()
    assert len(entries) >= 20 and not figures.crashed, summary
    assert figures.false_errors == 0 and figures.errors_right_ratio >= 0.95, summary
    assert figures.flagged_ratio >= 0.90, summary
