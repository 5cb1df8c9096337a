"""Warm ranks (``%torchrun_start``): real torchrun jobs whose ranks stay up and run notebook cells,
in a real IPython shell and a real Jupyter kernel.

One 2 x 2 group serves every test that keeps its group up; each test that ends a group (a dead
rank, a hang, a broken collective, an idle timeout, a kernel's exit) starts a small one of its
own, and checks that no process of it is left.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from conftest import find_leftover_processes
from ipython_helpers import labkit_shell, shown_lines
from process_helpers import interrupt_when

from labkit.errors import LaunchError, ParameterError
from labkit.runtime import magic
from labkit.runtime.interrupts import Interrupted
from labkit.runtime.warm import WarmGroup
from labkit.runtime.warm_cell import CellFailedError, WarmGroupEnded

pytestmark = pytest.mark.slow


def left_of(group: WarmGroup) -> list[str]:
    """What still runs of ``group`` (its agents and ranks carry its folder in LABKIT_RUN_DIR)."""
    return find_leftover_processes(str(group.folder))


@pytest.fixture(scope="module")
def shell():
    with labkit_shell() as ip:
        yield ip


@pytest.fixture(scope="module")
def warm(shell):
    """A 2 x 2 warm group started once for the module by ``%torchrun_start``; whatever a test
    did, nothing of it is left after."""
    shell.run_line_magic("torchrun_start", "--nnodes 2 --nproc-per-node 2 --quiet")
    group = magic.warm_group
    try:
        yield group
    finally:
        if magic.warm_group is not None:
            shell.run_line_magic("torchrun_stop", "")
        assert left_of(group) == []


def run(shell, cell: str, capsys) -> tuple[object, list[str]]:
    """Run a cell; (the exception it raised or None, the lines it showed)."""
    capsys.readouterr()
    outcome = shell.run_cell(cell, store_history=False)
    return outcome.error_in_exec, shown_lines(capsys.readouterr().out)


@pytest.fixture
def started():
    """``started(nproc_per_node, **options)``: a 1-node warm group of the test's own (the tests
    that end their group); stopped after the test whatever happened."""
    groups: list[WarmGroup] = []

    def start(nproc_per_node: int = 1, **options) -> WarmGroup:
        group = WarmGroup(1, nproc_per_node, **options)
        groups.append(group)
        group.start(echo=None)
        return group

    yield start
    for group in groups:
        group.stop()


def test_the_group_has_every_rank_joined_on_two_nodes(warm):
    assert warm.up and warm.world_size == 4
    assert sorted(warm.ranks) == [0, 1, 2, 3]
    assert {hello["node"] for hello in warm.ranks.values()} == {0, 1}
    assert {hello["backend"] for hello in warm.ranks.values()} == {"gloo"}


def test_a_variable_set_in_one_cell_is_there_in_the_next(warm, shell, capsys):
    error, _ = run(shell, "%%torchrun\nimport os\nx = 10 * int(os.environ['RANK'])\n", capsys)
    assert error is None
    error, shown = run(shell, "%%torchrun\nprint('x is', x)\n", capsys)
    assert error is None
    assert sorted(shown) == ["[node0 rank0] x is 0", "[node0 rank1] x is 10",
                             "[node1 rank2] x is 20", "[node1 rank3] x is 30"]


def test_output_streams_while_the_cell_runs(warm, shell, capsys, tmp_path):
    """A line a rank prints reaches the notebook before the cell ends: the cell waits for a
    file the test writes only once it has seen rank 0's first line."""
    go = tmp_path / "go"
    shell.user_ns["go"] = str(go)
    seen: list[str] = []

    def echo_and_release(line: str) -> None:
        seen.append(line)
        if "waiting" in line:
            go.touch()

    group = warm
    result = group.run_cell("import os, pathlib, time\nif os.environ['RANK'] == '0':\n"
                            "    print('waiting', flush=True)\n"
                            "    while not pathlib.Path(go).exists():\n"
                            "        time.sleep(0.01)\n"
                            "    print('released')\n", {"go": str(go)}, echo=echo_and_release)
    assert result.cell > 0
    assert seen == ["[node0 rank0] waiting", "[node0 rank0] released"]


def test_vars_and_publish_as_in_cold_cells_on_the_joined_group(warm, shell, capsys):
    """The ranks joined the process group at start: a collective runs at once, and a cell
    written for a fresh job (dist.setup() ... dist.teardown()) runs unchanged."""
    shell.user_ns["size"] = 3
    shell.user_ns.pop("result", None)
    cell = ("%%torchrun --vars size\n"
            "import torch, torch.distributed as tdist\n"
            "from labkit.runtime import dist, publish\n"
            "info = dist.setup()\n"
            "t = torch.full((size,), float(info.rank + 1))\n"
            "tdist.all_reduce(t)\n"
            "publish({'sum': t.tolist(), 'world': info.world_size})\n"
            "dist.teardown()\n")
    error, _ = run(shell, cell, capsys)
    assert error is None
    assert shell.user_ns["result"] == {"sum": [10.0] * 3, "world": 4}
    error, _ = run(shell, "%%torchrun --result again\nimport torch.distributed as tdist\n"
                          "tdist.barrier()\npublish({'still': tdist.is_initialized()})\n", capsys)
    assert error is None and shell.user_ns["again"] == {"still": True}


def test_an_exception_on_one_rank_raises_with_its_traceback_and_the_group_stays_up(
        warm, shell, capsys):
    shell.user_ns.pop("never", None)
    cell = ("%%torchrun --result never\n"
            "import os\n"
            "if os.environ['RANK'] == '2':\n"
            "    raise ValueError('rank 2 is broken')\n")
    error, shown = run(shell, cell, capsys)
    assert isinstance(error, CellFailedError), error
    assert error.failure.rank == 2 and error.others == []
    assert 'File "<cell ' in str(error) and '", line 3, in <module>' in str(error)
    assert "raise ValueError('rank 2 is broken')" in str(error)
    assert "ValueError: rank 2 is broken" in shown  # the rank's traceback, shown as is
    assert "The warm group is still up: the next cell runs on it." in shown
    assert "never" not in shell.user_ns
    error, shown = run(shell, "%%torchrun\nprint('answering')\n", capsys)
    assert error is None and len(shown) == 4


def test_a_syntax_error_raises_before_any_rank_sees_it(warm, shell, capsys):
    error, _ = run(shell, "%%torchrun\nprint('unclosed'\n", capsys)
    assert isinstance(error, SyntaxError)
    assert warm.up


def test_cold_takes_a_cell_past_the_warm_group(warm, shell):
    """--cold goes the cold way, checks included: a job of 0 nodes is refused there, before
    anything starts, where the warm group would have refused the shape instead."""
    with pytest.raises(LaunchError, match="need at least 1 node"):
        shell.run_cell_magic("torchrun", "--cold --nnodes 0", "print('never runs')\n")
    assert warm.up


def test_a_cell_that_asks_for_another_shape_or_env_is_refused(warm, shell):
    with pytest.raises(ParameterError, match="--nnodes 3 but the warm group is 2 nodes x 2 "
                                             "ranks: add --cold"):
        shell.run_cell_magic("torchrun", "--nnodes 3", "print('never runs')\n")
    with pytest.raises(ParameterError, match="give --env to %torchrun_start"):
        shell.run_cell_magic("torchrun", "--env A=1", "print('never runs')\n")
    with pytest.raises(ParameterError, match="already"):
        shell.run_line_magic("torchrun_start", "--nnodes 1")


def test_interrupting_a_warm_cell_stops_it_on_the_ranks_and_keeps_the_group(
        warm, shell, capsys, tmp_path):
    shell.user_ns["flags"] = str(tmp_path)
    cell = ("%%torchrun --vars flags\n"
            "import os, pathlib, time\n"
            "pathlib.Path(flags, os.environ['RANK']).touch()\n"
            "time.sleep(300)\n")
    with interrupt_when(lambda: len(list(tmp_path.iterdir())) == 4):
        error, shown = run(shell, cell, capsys)
    assert isinstance(error, Interrupted), error
    assert shown == [error.line]
    assert error.line.startswith("Interrupted: stopped the cell on ranks 0, 1, 2, 3; the warm "
                                 "group is still up (")
    error, shown = run(shell, "%%torchrun\nprint('after the interrupt')\n", capsys)
    assert error is None and len(shown) == 4


def test_stop_ends_every_process_and_cells_run_cold_again(warm, shell, capsys):
    """Last of the module's tests on the shared group."""
    capsys.readouterr()
    shell.run_line_magic("torchrun_stop", "")
    (said,) = shown_lines(capsys.readouterr().out)
    assert said.startswith("warm group stopped: ") and " processes ended, none left." in said
    assert magic.warm_group is None and not warm.up and left_of(warm) == []
    assert not warm.folder.exists()
    shell.run_line_magic("torchrun_stop", "")
    assert shown_lines(capsys.readouterr().out) == [
        "no warm group is up: %%torchrun cells run as jobs of their own (cold)"]


def test_a_dead_rank_ends_the_group_and_says_how_it_died(started):
    group = started(nproc_per_node=2)
    group.run_cell("pass", echo=None)  # a cell before: the ranks' stderr holds its end markers
    with pytest.raises(WarmGroupEnded) as info:
        group.run_cell("import os, signal, time\nif os.environ['RANK'] == '1':\n"
                       "    os.kill(os.getpid(), signal.SIGKILL)\ntime.sleep(300)\n", echo=None)
    first = str(info.value).splitlines()[0]
    assert first.startswith("rank 1 (node 0) died during the cell: killed by SIGKILL (signal 9)."
                            " The warm group was ended (")
    assert "none left). Start it again with %torchrun_start --nnodes 1 --nproc-per-node 2" in first
    assert "labkit-fence" not in str(info.value)  # the cell protocol's markers stay unshown
    assert left_of(group) == [] and not group.folder.exists()
    with pytest.raises(WarmGroupEnded, match="the warm group has ended: rank 1 .* died"):
        group.run_cell("pass")


def test_a_rank_that_dies_between_cells_ends_the_group_at_once(started):
    """Nobody runs a cell: the group's watch ends it rather than leave it half-alive."""
    group = started()
    os.kill(int(group.ranks[0]["pid"]), signal.SIGKILL)
    limit = time.monotonic() + 10 * group.grace_s  # generous: the watch looks every 0.1 s
    while group.up and time.monotonic() < limit:
        time.sleep(0.05)
    assert not group.up and left_of(group) == []
    assert group.ending.reason.startswith("rank 0 (node 0) died between cells: killed by SIGKILL")


def test_a_hung_cell_ends_the_group_at_its_timeout(started):
    group = started()
    with pytest.raises(WarmGroupEnded, match=r"^the cell ran past its 0.5 s timeout \(still "
                                             r"running on rank 0\)\. The warm group was ended "
                                             r"\(\d+ processes ended, none left\)"):
        group.run_cell("import time\ntime.sleep(300)\n", timeout_s=0.5, echo=None)
    assert left_of(group) == []


def test_a_broken_collective_ends_the_group(started):
    group = started(nproc_per_node=2, env={"LABKIT_COLLECTIVE_TIMEOUT": "0.5"})
    with pytest.raises(WarmGroupEnded) as info:  # rank 0 all_reduces alone: gloo times out
        group.run_cell("import os, torch, torch.distributed as tdist\n"
                       "if os.environ['RANK'] == '0':\n    tdist.all_reduce(torch.ones(1))\n",
                       echo=None)
    message = str(info.value)
    assert message.startswith("rank 0 (node 0) left the process group broken after a failed "
                              "collective: RuntimeError: ")
    assert 'File "<cell 1>", line 3, in <module>' in message
    assert left_of(group) == []


def test_a_rank_that_cannot_be_interrupted_ends_the_group_on_ctrl_c(started, tmp_path):
    """A rank that does not stop on SIGINT (here it ignores it; stuck in a collective, it could
    not run Python's handler) gets the group's grace, then the group is ended, and said so."""
    group = started()
    flag = tmp_path / "ignoring"
    cell = ("import pathlib, signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            f"pathlib.Path({str(flag)!r}).touch()\ntime.sleep(300)\n")
    with interrupt_when(flag.exists), pytest.raises(Interrupted) as info:
        group.run_cell(cell, echo=None)
    assert info.value.line.startswith("Interrupted: stopped the warm group, since rank 0 could "
                                      "not be interrupted (stuck in native code")
    assert info.value.line.endswith("processes ended, none left. Start it again with "
                                    "%torchrun_start --nnodes 1 --nproc-per-node 1.")
    assert info.value.left == 0 and left_of(group) == []


def test_the_idle_timeout_ends_the_group(started):
    group = started(idle_timeout_s=0.5)
    limit = time.monotonic() + 0.5 + 10 * group.grace_s
    while group.up and time.monotonic() < limit:
        time.sleep(0.05)
    assert group.ending is not None and group.ending.reason == "idle for 0.5 s (--idle-timeout)"
    assert left_of(group) == []
    with pytest.raises(WarmGroupEnded, match="has ended: idle for 0.5 s"):
        group.run_cell("pass")


def test_a_lab_kernel_loads_labkit_and_its_shutdown_ends_the_group(monkeypatch):
    """The lab's kernelspec: %%torchrun without %load_ext, again after a restart; the restart
    (a kernel shutdown) ends the warm group the old kernel started."""
    from jupyter_client.manager import start_new_kernel

    from labkit.course.execution import LAB_JUPYTER_PATH

    monkeypatch.setenv("JUPYTER_PATH", str(LAB_JUPYTER_PATH))
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        assert km.kernel_spec.argv[-1] == "--ext=labkit.runtime.magic"

        def ask(code: str) -> str:
            out: list[str] = []
            reply = kc.execute_interactive(code, timeout=600, output_hook=lambda msg: out.append(
                msg["content"].get("text", "")))
            assert reply["content"]["status"] == "ok", reply["content"]
            return "".join(out)

        assert ask("import sys; print(sys.executable)") == f"{sys.executable}\n"
        assert ask("print(get_ipython().find_cell_magic('torchrun') is not None)") == "True\n"
        assert ask("%load_ext labkit") == ""  # a notebook's own, after the kernel's: silent
        ask("%torchrun_start --quiet")
        folder = ask("from labkit.runtime import magic; print(magic.warm_group.folder)").strip()
        assert "[node0 rank0] hi" in ask("%%torchrun\nprint('hi')\n")
        assert find_leftover_processes(folder)
        km.restart_kernel(now=False)  # a shutdown request, then a fresh kernel
        kc.wait_for_ready(timeout=600)
        assert find_leftover_processes(folder) == []
        assert not Path(folder).exists()  # ended by the kernel's exit, not only by the ranks
        assert ask("print(get_ipython().find_cell_magic('torchrun') is not None)") == "True\n"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
