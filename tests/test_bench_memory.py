"""labkit.scaling.memory: real gloo launches at 2 and 4 ranks with 8 MB per agent.

The invariant of the design, with a generous margin: at 4 ranks a replicated rank holds 4x the
data of a sharded one, so its extra resident memory is larger; sampled rows are always right.
"""

from __future__ import annotations

import argparse

import pytest

from labkit.errors import ParameterError
from labkit.scaling.memory import add_arguments, measure_memory


@pytest.fixture(scope="module")
def rows() -> dict[tuple[int, str], dict]:
    found = measure_memory((2, 4), per_agent_mb=8)
    return {(r["world_size"], r["mode"]): r for r in found}


@pytest.mark.slow
def test_all_runs_and_samples_correct(rows: dict) -> None:
    assert set(rows) == {(n, m) for n in (2, 4) for m in ("replicated", "sharded")}
    assert all(r["sample_ok"] for r in rows.values())
    assert rows[(4, "replicated")]["held_mb"] == 32 and rows[(4, "sharded")]["held_mb"] == 8


@pytest.mark.slow
def test_replicated_holds_more_than_sharded(rows: dict) -> None:
    replicated, sharded = rows[(4, "replicated")], rows[(4, "sharded")]
    # 32 MB of data against 8 MB, read after malloc_trim: more than 16 MB apart.
    assert replicated["rss_extra_mb_max"] > sharded["rss_extra_mb_max"] + 16
    assert replicated["rss_extra_mb_mean"] > sharded["rss_extra_mb_mean"]
    # a replicated rank really holds everyone's rows resident
    assert replicated["rss_extra_mb_max"] >= 0.9 * replicated["held_mb"]
    # a sharded rank holds its own rows and a sampled batch (0.5 MB), not others' rows
    assert sharded["rss_extra_mb_max"] < sharded["held_mb"] + 8


def test_bad_mode_is_rejected() -> None:
    with pytest.raises(ParameterError):
        measure_memory((2,), per_agent_mb=1, mode="mirrored")


def test_cli_arguments() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--ranks", "2,4,8", "--per-agent-mb", "32", "--json"])
    assert (args.ranks, args.per_agent_mb, args.json) == ("2,4,8", 32.0, True)
