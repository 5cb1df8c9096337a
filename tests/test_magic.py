"""The ``%%torchrun`` cell magic in a real IPython shell, running real torchrun jobs."""

from __future__ import annotations

import traceback

import pytest
from ipython_helpers import labkit_shell, shown_lines
from process_helpers import interrupt_when

from labkit.errors import ParameterError
from labkit.runtime import magic
from labkit.runtime.failures import RankFailedError
from labkit.runtime.interrupts import Interrupted
from labkit.runtime.magic import cell_script, parse_env


@pytest.fixture(scope="module")
def shell():
    """An IPython shell with ``%load_ext labkit`` done; process-wide hooks put back after."""
    with labkit_shell() as ip:
        yield ip


@pytest.mark.slow
def test_cell_runs_on_every_rank_and_rank0_publishes(shell, capsys):
    shell.user_ns["size"] = 3
    shell.user_ns.pop("result", None)
    cell = (
        "%%torchrun --nnodes 2 --nproc-per-node 1 --vars size --timeout 180\n"
        "import torch, torch.distributed as dist\n"
        "from labkit.runtime import dist as ldist, publish\n"
        "info = ldist.setup('gloo')\n"
        "t = torch.full((size,), float(info.rank + 1))\n"
        "dist.all_reduce(t)\n"
        "print('sum', t.tolist())\n"
        "publish({'size': size, 'sum': t.tolist(), 'world': info.world_size})\n"
        "ldist.teardown()\n"
    )
    outcome = shell.run_cell(cell, store_history=False)
    out = capsys.readouterr().out
    assert outcome.success, outcome.error_in_exec or outcome.error_before_exec
    assert shell.user_ns["result"] == {"size": 3, "sum": [3.0, 3.0, 3.0], "world": 2}
    # The ranks' output streams into the cell, prefixed.
    assert "[node0 rank0] sum [3.0, 3.0, 3.0]" in out
    assert "[node1 rank1] sum [3.0, 3.0, 3.0]" in out
    assert magic.last_launch is not None and magic.last_launch.ok


@pytest.mark.slow
def test_failing_rank_raises_in_the_cell_with_its_traceback(shell, capsys):
    body = (
        "import os\n"
        "rank = int(os.environ['RANK'])\n"
        "if rank == 1:\n"
        "    raise RuntimeError(f'rank {rank} is broken')\n"
        "print('fine')\n"
    )
    outcome = shell.run_cell(
        "%%torchrun --nproc-per-node 2 --quiet --result never --timeout 120\n" + body,
        store_history=False)
    capsys.readouterr()
    err = outcome.error_in_exec
    assert isinstance(err, RankFailedError), err
    assert err.failure.rank == 1
    message = str(err)
    assert "RuntimeError: rank 1 is broken" in message
    # The cell's line 4 is the script's line 5 (one header line restores --vars).
    assert 'cell.py", line 5, in <module>' in message
    assert "raise RuntimeError(f'rank {rank} is broken')" in message
    assert "never" not in shell.user_ns


@pytest.mark.slow
def test_interrupting_a_cold_cell_prints_one_line_and_leaves_nothing(shell, capsys, tmp_path,
                                                                     leftover_processes):
    """Ctrl-C while a cold job runs: the agents' interrupt tracebacks and labkit's own frames
    stay unshown; one line says what stopped and counts the processes, none left."""
    flag = tmp_path / "run-dir"
    shell.user_ns["flag"] = str(flag)
    cell = ("%%torchrun --vars flag --timeout 300\n"
            "import os, pathlib, time\n"
            "pathlib.Path(flag).write_text(os.environ['LABKIT_RUN_DIR'])\n"
            "time.sleep(300)\n")
    capsys.readouterr()
    with interrupt_when(flag.exists):
        outcome = shell.run_cell(cell, store_history=False)
    shown = shown_lines(capsys.readouterr().out)
    err = outcome.error_in_exec
    assert isinstance(err, Interrupted) and isinstance(err, KeyboardInterrupt), err
    assert shown == [err.line], shown
    assert err.line.startswith("Interrupted: stopped the cold %%torchrun job (1 node x 1 rank): ")
    assert err.ended >= 3 and err.left == 0  # the agent, the rank and its stderr tap
    assert err.line.endswith(f"{err.ended} processes ended, none left.")
    assert leftover_processes(flag.read_text()) == []


@pytest.mark.slow
def test_vars_must_name_defined_json_values(shell):
    shell.user_ns.pop("nowhere", None)
    with pytest.raises(ParameterError, match="nowhere"):
        shell.run_cell_magic("torchrun", "--vars nowhere", "print('never runs')\n")
    shell.user_ns["odd"] = {1, 2}
    with pytest.raises(ParameterError, match="JSON-able"):
        shell.run_cell_magic("torchrun", "--vars odd", "print('never runs')\n")


@pytest.mark.slow
def test_bad_env_in_the_magic_is_refused(shell):
    with pytest.raises(ParameterError, match="KEY=VALUE"):
        shell.run_cell_magic("torchrun", "--env NOVALUE", "print('never runs')\n")


def test_cell_script_restores_vars_and_keeps_cell_lines():
    cell = "a = x + 1\nb = name.upper()\nraise ValueError(b)\n"
    shared = {"x": 41, "name": "it's \"quoted\"\n", "items": [1, {"k": None}]}
    script = cell_script(cell, shared)
    assert script.splitlines()[1:] == cell.splitlines()
    namespace: dict = {}
    with pytest.raises(ValueError) as info:
        exec(compile(script, "cell.py", "exec"), namespace)
    assert namespace["x"] == 41 and namespace["a"] == 42
    assert namespace["name"] == shared["name"] and namespace["items"] == shared["items"]
    frame = traceback.extract_tb(info.value.__traceback__)[-1]
    assert frame.filename == "cell.py" and frame.lineno == 4  # cell line 3 + the header


def test_cell_script_refuses_non_json_values():
    with pytest.raises(TypeError):
        cell_script("pass", {"s": {1, 2}})


def test_parse_env():
    assert parse_env([]) == {}
    assert parse_env(["A=1", "B=x=y", "C=", "A=2"]) == {"A": "2", "B": "x=y", "C": ""}
    for bad in ("NOVALUE", "=value", ""):
        with pytest.raises(ParameterError, match="KEY=VALUE"):
            parse_env([bad])
