"""Ranks that die without a Python exception (a C++ abort, a segfault, SIGKILL), with real
torchrun agents: the error names the rank, its node, the signal and the rank's last stderr lines.

Two parts make that work: torchrun reports each failed worker process's exit code and pid, and
labkit's worker runs a stderr tap that prefixes the rank's C-level stderr and keeps its last
lines (``labkit.runtime.worker``). The tap is checked first on its own, without torchrun.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from conftest import find_leftover_processes

from labkit.runtime.failures import RankSignaledError
from labkit.runtime.launch import launch_local
from labkit.runtime.proctree import end_launch
from labkit.runtime.worker import STDERR_TAILS_ENV, StderrTail


def write_script(folder: Path, text: str, name: str = "job.py") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def line_of(script: Path, needle: str) -> int:
    return next(n for n, line in enumerate(script.read_text().splitlines(), 1) if needle in line)


TAPPED = """\
import os
import sys

print("python line", file=sys.stderr)
os.write(2, b"native line\\nnative partial")  # what C/C++ code writes, past sys.stderr
os.write(2, b" done\\n")
print("to stdout")
os.abort()
"""


def test_stderr_tap_prefixes_native_lines_and_keeps_the_tail(tmp_path, leftover_processes):
    script = write_script(tmp_path, TAPPED)
    tails = tmp_path / "tails"
    mark = uuid.uuid4().hex
    env = {**os.environ, "GROUP_RANK": "1", "RANK": "3", "LOCAL_RANK": "1",
           "TORCHELASTIC_RESTART_COUNT": "2", STDERR_TAILS_ENV: str(tails),
           "LABKIT_TEST_MARK": mark}
    proc = subprocess.run([sys.executable, "-m", "labkit.runtime.worker", str(script)], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == -signal.SIGABRT, proc.stderr
    assert proc.stdout.splitlines() == ["[node1 rank3] to stdout"]
    err = proc.stderr.splitlines()
    assert err[:3] == ["[node1 rank3] python line", "[node1 rank3] native line",
                       "[node1 rank3] native partial done"], proc.stderr
    assert "[node1 rank3] Fatal Python error: Aborted" in err  # faulthandler's report
    assert all(line.startswith("[node1 rank3] ") for line in err), proc.stderr
    (tail,) = StderrTail.read_all(tails).values()
    assert (tail.rank, tail.node, tail.local_rank, tail.restart) == (3, 1, 1, 2)
    assert tail.lines[:3] == ("python line", "native line", "native partial done")
    assert f'  File "{script}", line {line_of(script, "os.abort")} in <module>' in tail.lines
    assert json.loads((tails / f"pid{tail.pid}.json").read_text())["lines"] == list(tail.lines)
    while leftover_processes(mark, name="LABKIT_TEST_MARK"):  # the tap ends after its record
        time.sleep(0.01)


ABORTS = """\
import os
import sys
import time
from pathlib import Path

ready = Path(sys.argv[1])
if os.environ["RANK"] == "0":
    ready.touch()
    while True:  # waits for rank 1, as in a collective, until torchrun stops it
        time.sleep(0.05)
while not ready.exists():  # rank 0 is up (and has its stderr tap)
    time.sleep(0.01)
print("rank 1 gives up", file=sys.stderr, flush=True)
os.write(2, b"terminate called after throwing an instance of 'std::runtime_error'\\n"
            b"  what():  native failure\\n")  # what C++ prints before it aborts
os.abort()
"""


@pytest.mark.slow
def test_aborting_rank_is_named_with_its_signal_and_stderr(tmp_path, leftover_processes):
    script = write_script(tmp_path, ABORTS)
    run_dir = tmp_path / "run"
    result = launch_local(script, str(tmp_path / "ready"), nproc_per_node=2, timeout_s=180,
                          echo=None, run_dir=run_dir)
    log = "\n".join(result.output)
    with pytest.raises(RankSignaledError) as info:
        result.check()
    err, failure = info.value, info.value.failure
    assert (failure.rank, failure.node, failure.restart) == (1, 0, 0), log
    assert failure.signal == "SIGABRT" and failure.exitcode == -signal.SIGABRT
    # torchrun stopped rank 0 after rank 1 died: it comes second
    assert [(f.rank, f.signal) for f in err.others] == [(0, "SIGTERM")], log
    message = str(err)
    assert message.startswith("rank 1 (node 0, restart 0) failed: killed by SIGABRT (signal 6)\n"
                              "  then rank 0 (node 0, restart 0): killed by SIGTERM (signal 15)")
    stderr = message[message.index("Last lines rank 1 wrote to stderr:"):]
    expected = ["rank 1 gives up", "terminate called after throwing an instance of "
                "'std::runtime_error'", "what():  native failure", "Fatal Python error: Aborted",
                f'File "{script}", line {line_of(script, "os.abort")} in <module>',
                "SIGABRT: native code aborted"]
    assert [stderr.index(text) for text in expected] == sorted(
        stderr.index(text) for text in expected), message  # all there, in the order written
    assert "worker.py" not in stderr and "Extension modules" not in stderr
    # the native lines carry the rank's prefix in the output too
    assert "[node0 rank1]   what():  native failure" in result.output, log
    assert leftover_processes(run_dir) == []


DIES = """\
import ctypes
import os
import signal
import sys
import time
from pathlib import Path

rank = int(os.environ["RANK"])
ready = Path(sys.argv[1])
(ready / str(rank)).touch()
while len(list(ready.iterdir())) < 2:  # both ranks run: neither is stopped for the other
    time.sleep(0.01)
print(f"rank {rank} about to die", file=sys.stderr, flush=True)
if rank == 0:
    os.kill(os.getpid(), signal.SIGKILL)
ctypes.string_at(0)  # reads address 0
"""


@pytest.mark.slow
def test_killed_and_segfaulting_ranks_are_each_reported(tmp_path, leftover_processes):
    script = write_script(tmp_path, DIES)
    ready, run_dir = tmp_path / "ready", tmp_path / "run"
    ready.mkdir()
    result = launch_local(script, str(ready), nnodes=2, timeout_s=180, echo=None,
                          run_dir=run_dir)
    log = "\n".join(result.output)
    by_rank = {f.rank: f for f in result.failures}
    assert sorted(by_rank) == [0, 1] and len(result.failures) == 2, log
    killed, segfaulted = by_rank[0], by_rank[1]
    assert (killed.node, killed.signal, killed.exitcode) == (0, "SIGKILL", -signal.SIGKILL)
    assert killed.error == "killed by SIGKILL (signal 9)"
    assert killed.stderr == ("rank 0 about to die",)
    assert (segfaulted.node, segfaulted.signal) == (1, "SIGSEGV")
    assert segfaulted.stderr[:2] == ("rank 1 about to die",
                                     "Fatal Python error: Segmentation fault")
    assert f'  File "{script}", line {line_of(script, "string_at")} in <module>' \
        in segfaulted.stderr
    with pytest.raises(RankSignaledError) as info:
        result.check()
    message = str(info.value)
    assert "killed by SIGKILL (signal 9)" in message and "killed by SIGSEGV (signal 11)" in message
    assert "out-of-memory killer" in message or "segmentation fault" in message
    assert leftover_processes(run_dir) == []


KILLED_ONCE = """\
import os
import sys

from labkit.runtime import publish
from labkit.reliability.faults import faults_from_env, maybe_inject

print(f"attempt {os.environ['TORCHELASTIC_RESTART_COUNT']}", file=sys.stderr, flush=True)
maybe_inject(faults_from_env(), rank=int(os.environ["RANK"]), node=0, step=0)
publish({"restart": int(os.environ["TORCHELASTIC_RESTART_COUNT"])})
"""


@pytest.mark.slow
def test_rank_killed_on_purpose_then_restarted_does_not_raise(tmp_path, leftover_processes):
    script = write_script(tmp_path, KILLED_ONCE)
    run_dir = tmp_path / "run"
    result = launch_local(script, max_restarts=1, timeout_s=180, echo=None, run_dir=run_dir,
                          env={"LABKIT_FAULTS": "kill:rank=0,step=0"})
    log = "\n".join(result.output)
    assert result.ok and result.check() is result, log
    assert result.published == {"restart": 1}
    (failure,) = result.failures  # kept, like a failure a restart recovered from
    assert (failure.rank, failure.restart, failure.signal) == (0, 0, "SIGKILL"), log
    assert failure.stderr == ("attempt 0",)
    assert leftover_processes(run_dir) == []


def default_sigint() -> None:
    """In the child: SIGINT as a terminal delivers it. A shell running this suite in the
    background (``cmd &``) ignores SIGINT, and an ignored signal stays ignored across exec."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_labkit_launch_ended_by_a_signal_removes_its_folder_and_processes(tmp_path, sig, code):
    """``labkit launch`` on simulated nodes, ended by SIGTERM or Ctrl-C while its ranks run:
    one line, the exit code a signal gives, and no process or temp folder of the launch left."""
    script = write_script(tmp_path, """\
        import os, time
        print("ranks-running", os.environ["RANK"], flush=True)
        time.sleep(600)
        """)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    mark = uuid.uuid4().hex
    proc = subprocess.Popen(
        [sys.executable, "-m", "labkit", "launch", "--nnodes", "1", "--nproc-per-node", "2",
         str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(scratch), "LABKIT_TEST_MARK": mark},
        preexec_fn=default_sigint)
    try:
        seen = 0
        for line in proc.stdout:  # the ranks run: the launch folder exists now
            seen += "ranks-running" in line
            if seen == 2:
                break
        assert [p.name for p in scratch.iterdir()][0].startswith("labkit-launch-")
        proc.send_signal(sig)
        assert proc.wait(timeout=120) == code
        said = proc.stderr.read().strip().splitlines()
        assert said[-1] in ("labkit: launch ended by SIGTERM",
                            "labkit: launch interrupted (Ctrl-C)")
        assert list(scratch.iterdir()) == []
        assert find_leftover_processes(mark, name="LABKIT_TEST_MARK") == []
    finally:  # a failed check must not leave the job running for the tests after it
        end_launch(mark, name="LABKIT_TEST_MARK")
        proc.kill()
        proc.wait()
