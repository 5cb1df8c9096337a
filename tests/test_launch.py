"""The launcher with real torchrun agents on 127.0.0.1: collectives, failures, hangs, restarts.

Each 2-node launch costs several seconds (every agent and rank imports torch), so the launches
here are few and each checks many things. Commands for real clusters are run through stand-in
``torchrun``/``ssh``/``srun`` scripts to check their quoting end to end.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from labkit.cluster import remote, slurm, slurm_script, ssh_commands
from labkit.cluster.hosts import SshSettings, parse_hosts
from labkit.cluster.remote import cleanup_script
from labkit.cluster.ssh import explain_failure
from labkit.errors import LabkitError, LaunchError
from labkit.runtime import launch
from labkit.runtime.failures import LaunchTimeoutError, RankFailedError
from labkit.runtime.launch import launch_code, launch_local
from labkit.runtime.ports import free_port
from labkit.runtime.proctree import MARK_ENV
from labkit.runtime.worker import PrefixedLines

LINE = re.compile(r"^\[node(\d+) rank(\d+)\] (.*)$")


def write_script(folder: Path, text: str, name: str = "job.py") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def line_number(script: Path, needle: str) -> int:
    """1-based line of the first line of ``script`` that contains ``needle``."""
    for number, line in enumerate(script.read_text().splitlines(), 1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in {script}")


def rank_lines(output: list[str], text: str) -> dict[int, tuple[int, str]]:
    """rank -> (node in the prefix, rest) for prefixed lines whose rest starts with ``text``."""
    found = {}
    for line in output:
        match = LINE.match(line)
        if match and match.group(3).startswith(text):
            rank = int(match.group(2))
            assert rank not in found, f"rank {rank} printed {text!r} twice:\n" + "\n".join(output)
            found[rank] = (int(match.group(1)), match.group(3))
    return found


# --- real launches ---------------------------------------------------------------------------

COLLECTIVES = """\
import os
import sys

import torch
import torch.distributed as dist

from labkit.runtime import dist as ldist
from labkit.runtime import publish

info = ldist.setup("gloo")  # gloo on any machine: ranks may outnumber GPUs
total = torch.tensor([float(info.rank + 1)])
dist.all_reduce(total)
gathered = [torch.zeros(1, dtype=torch.int64) for _ in range(info.world_size)]
dist.all_gather(gathered, torch.tensor([info.rank]))
env = os.environ
print(f"hello rank={env['RANK']} group={env['GROUP_RANK']} local={env['LOCAL_RANK']}")
print(f"stderr from {info.rank}", file=sys.stderr)
# Every rank publishes; only rank 0's object may come back.
publish({"from": info.rank, "sum": total.item(), "ranks": [int(r) for r in gathered],
         "world": info.world_size, "num_nodes": info.num_nodes, "backend": info.backend})
ldist.teardown()
print(f"unterminated {info.rank}", end="")  # the worker flushes a partial last line
"""


@pytest.mark.slow
def test_two_nodes_two_ranks_collectives_publish_and_prefixes(tmp_path, leftover_processes):
    script = write_script(tmp_path, COLLECTIVES)
    run_dir = tmp_path / "runs" / "job"  # does not exist yet: the launcher creates it
    result = launch_local(script, nnodes=2, nproc_per_node=2, timeout_s=180, echo=None,
                          run_dir=run_dir)
    log = "\n".join(result.output)
    assert result.ok, log
    assert result.returncode == 0 and result.node_returncodes == [0, 0], log
    assert not result.timed_out and result.failures == []
    assert len(result.commands) == 2
    assert result.published == {
        "from": 0, "sum": 10.0, "ranks": [0, 1, 2, 3], "world": 4, "num_nodes": 2,
        "backend": "gloo",
    }

    hello = rank_lines(result.output, "hello ")
    assert sorted(hello) == [0, 1, 2, 3], log
    groups = set()
    for rank, (node, text) in hello.items():
        fields = dict(item.split("=") for item in text.split()[1:])
        assert int(fields["rank"]) == rank  # the prefix names the rank that printed
        assert int(fields["group"]) == node  # ... and its node is torchrun's GROUP_RANK
        assert node == rank // 2 and int(fields["local"]) == rank % 2
        groups.add(node)
    assert groups == {0, 1}
    assert sorted(rank_lines(result.output, "stderr from ")) == [0, 1, 2, 3], log
    unterminated = rank_lines(result.output, "unterminated ")
    assert {rank: text for rank, (_, text) in unterminated.items()} == {
        rank: f"unterminated {rank}" for rank in range(4)}, log
    # Every line is labelled: a rank's by the worker, anything else by its agent.
    assert all(line.startswith(("[node", "[torchrun0] ", "[torchrun1] "))
               for line in result.output), log
    assert leftover_processes(run_dir) == []
    assert not (run_dir / "tmp").exists(), "torchrun's scratch folder is removed"


RAISES = """\
import torch.distributed as dist

from labkit.runtime import dist as ldist

info = ldist.setup("gloo")
if info.rank == 1:
    raise ValueError("rank one gave up")
dist.barrier()  # rank 0 waits here for a rank that is gone
"""


@pytest.mark.slow
def test_raising_rank_fails_the_job_with_its_traceback(tmp_path, leftover_processes):
    script = write_script(tmp_path, RAISES)
    run_dir = tmp_path / "run"
    with pytest.raises(RankFailedError) as info:
        launch_local(script, nnodes=2, nproc_per_node=1, timeout_s=180, echo=None,
                     run_dir=run_dir, check=True)
    err, failure = info.value, info.value.failure
    message = str(err)
    assert failure.rank == 1 and failure.node == 1 and failure.restart == 0
    assert failure.error == "ValueError: rank one gave up"
    assert "ValueError: rank one gave up" in message
    raise_line = line_number(script, "raise ValueError")
    assert f'File "{script}", line {raise_line}, in <module>' in message
    assert 'raise ValueError("rank one gave up")' in message
    # The traceback starts at the user's script: no wrapper or runpy frames.
    assert "worker.py" not in failure.traceback and "runpy" not in failure.traceback
    failures = sorted((run_dir / "failures").glob("*.json"))
    assert "rank1-restart0.json" in [p.name for p in failures]
    assert leftover_processes(run_dir) == []


HANGS = """\
import time

import torch.distributed as dist

from labkit.runtime import dist as ldist

info = ldist.setup("gloo")
print("in the job", flush=True)
if info.rank == 1:
    time.sleep(3600)
dist.barrier()  # waits for rank 1, which never comes (collective timeout is 60 s)
"""


@pytest.mark.slow
def test_hanging_rank_is_ended_at_the_timeout(tmp_path, leftover_processes):
    script = write_script(tmp_path, HANGS)
    run_dir = tmp_path / "run"
    started = time.monotonic()
    result = launch_local(script, nnodes=2, nproc_per_node=1, timeout_s=15, echo=None,
                          run_dir=run_dir)
    took = time.monotonic() - started
    assert result.timed_out and not result.ok
    assert result.returncode != 0 and None not in result.node_returncodes
    assert took < 15 + 30, f"launch_local returned {took:.0f} s after a 15 s timeout"
    with pytest.raises(LaunchTimeoutError, match="15 s timeout"):
        result.check()
    assert leftover_processes(run_dir) == []


RESTARTS = """\
import os

from labkit.runtime import publish

restart = os.environ["TORCHELASTIC_RESTART_COUNT"]
if restart == "0":
    raise RuntimeError("first attempt fails")
publish({"restart": int(restart), "rank": int(os.environ["RANK"])})
"""


@pytest.mark.slow
def test_max_restarts_recovers_and_keeps_the_failure(leftover_processes):
    mark = uuid.uuid4().hex
    result = launch_code(RESTARTS, nnodes=1, nproc_per_node=1, max_restarts=1, timeout_s=120,
                         echo=None, env={"LABKIT_TEST_MARK": mark})
    log = "\n".join(result.output)
    assert result.returncode == 0 and result.ok, log
    assert result.check() is result
    assert result.published == {"restart": 1, "rank": 0}
    assert [(f.rank, f.restart, f.error) for f in result.failures] == [
        (0, 0, "RuntimeError: first attempt fails")]
    assert 'raise RuntimeError("first attempt fails")' in result.failures[0].traceback
    assert leftover_processes(mark, name="LABKIT_TEST_MARK") == []


@pytest.mark.slow
def test_node_that_never_joins_times_out_the_rendezvous(tmp_path, leftover_processes):
    script = write_script(tmp_path, "open(__file__ + '.ran', 'w').close()\n")
    run_dir = tmp_path / "run"
    result = launch_local(script, nnodes=2, nproc_per_node=1, nodes_started=1,
                          join_timeout_s=5, timeout_s=120, echo=None, run_dir=run_dir)
    log = "\n".join(result.output)
    assert result.returncode != 0 and not result.timed_out, log
    assert len(result.commands) == 1 and len(result.node_returncodes) == 1
    assert "RendezvousTimeoutError" in log
    assert not Path(f"{script}.ran").exists()  # no rank ever started
    with pytest.raises(LaunchError) as info:
        result.check()
    assert not isinstance(info.value, (RankFailedError, LaunchTimeoutError))
    assert leftover_processes(run_dir) == []


# --- errors before anything starts -------------------------------------------------------------


@pytest.fixture
def nothing_starts(monkeypatch):
    """Fail the test if the launcher gets as far as starting agents."""

    def refuse(*args, **kwargs):
        pytest.fail(f"agents were started: {args[0]}")

    monkeypatch.setattr(launch, "run_agents", refuse)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"script": "missing.py"}, "script not found: "),
        ({"nnodes": 0}, "at least 1 node"),
        ({"nproc_per_node": 0}, "at least 1 node and 1 rank"),
        ({"nodes_started": 3}, "nodes_started must be between 1 and nnodes=2"),
        ({"nodes_started": 0}, "nodes_started must be between 1 and nnodes=2"),
        ({"max_restarts": -1}, "max_restarts"),
        ({"timeout_s": 0}, "timeout must be positive"),
    ],
)
def test_bad_input_is_refused_before_starting(tmp_path, nothing_starts, options, message):
    write_script(tmp_path, "print('hi')\n")
    options = {"nnodes": 2, **options}
    script = tmp_path / options.pop("script", "job.py")
    run_dir = tmp_path / "run"
    with pytest.raises(LaunchError, match=re.escape(message)):
        launch_local(script, run_dir=run_dir, echo=None, **options)
    assert not run_dir.exists()


def _hold_port_range(count: int) -> tuple[int, list[socket.socket]]:
    """``count`` consecutive loopback ports, each bound and listening by a socket we hold."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count > 65535:
            continue
        held: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
                sock.listen()
        except OSError:
            for sock in held:
                sock.close()
            continue
        return base, held
    pytest.skip(f"found no {count} consecutive free loopback ports")


def test_no_free_port_in_the_range_is_an_error_and_nothing_starts(
        tmp_path, monkeypatch, nothing_starts, leftover_processes):
    base, held = _hold_port_range(3)
    spec = f"{base}-{base + 2}"
    monkeypatch.setenv("LABKIT_PORT_RANGE", spec)
    script = write_script(tmp_path, "print('hi')\n")
    run_dir = tmp_path / "run"
    try:
        with pytest.raises(LabkitError, match=re.escape(f"LABKIT_PORT_RANGE={spec}")):
            launch_local(script, nnodes=2, echo=None, run_dir=run_dir)
        assert leftover_processes(run_dir) == []
        assert not (run_dir / "published.json").exists()
        held.pop(1).close()  # free the middle port: the range now has exactly that one
        assert free_port() == base + 1
    finally:
        for sock in held:
            sock.close()


@pytest.mark.parametrize("spec", ["abc", "40010-40000", "0-10", "65000-70000", "40000"])
def test_bad_port_range_is_explained(monkeypatch, spec):
    monkeypatch.setenv("LABKIT_PORT_RANGE", spec)
    with pytest.raises(LabkitError, match="LABKIT_PORT_RANGE"):
        free_port()


# --- commands for real clusters ----------------------------------------------------------------


def test_ssh_commands_give_each_host_its_role_and_the_labs_interpreter():
    commands = ssh_commands(["h1", "root@h2"], 4, "train.py", ["--x", "a b"], workdir="/srv/lab",
                            rdzv_port=40123, ssh=SshSettings(port=2222, identity="/k/id",
                                                             options=("ConnectTimeout=5",)))
    assert len(commands) == 2
    for command, target in zip(commands, ["h1", "root@h2"], strict=True):
        assert command[:2] == ["ssh", "-tt"]  # a terminal: a dropped connection hangs up torchrun
        assert command[-2] == target
        for pair in (["-p", "2222"], ["-i", "/k/id"], ["-o", "BatchMode=yes"],
                     ["-o", "ConnectTimeout=5"]):
            assert pair[1] in command and command[command.index(pair[1]) - 1] == pair[0]
    first, second = (shlex.split(c[-1]) for c in commands)
    assert first[:4] == ["cd", "/srv/lab", "&&", "exec"]
    python = first.index("/srv/lab/.venv/bin/python")  # the lab's venv, not PATH's torchrun
    assert first[python + 1:python + 3] == ["-m", "torch.distributed.run"]
    for argv, name, is_host in ((first, "h1", "true"), (second, "h2", "false")):
        assert "--rdzv-endpoint=h1:40123" in argv  # the user is not part of the address
        assert f"--local-addr={name}" in argv and f"--rdzv-conf=is_host={is_host}" in argv
        assert "--nnodes=2" in argv and "--nproc-per-node=4" in argv
        assert not any(arg.startswith("--node-rank") for arg in argv)  # c10d assigns them
        assert argv[-3:] == ["train.py", "--x", "a b"]
    run_ids = {a for a in first + second if a.startswith("--rdzv-id=")}
    assert len(run_ids) == 1 and run_ids != {"--rdzv-id="}
    with pytest.raises(LaunchError):
        ssh_commands([], 1, "train.py")


@pytest.mark.parametrize(("spec", "words"), [
    ("", "at least one host"), ("h1,h1", "named twice"), ("a b", "bad host"),
    ("@h1", "bad host"), ("h1,", None),
])
def test_hosts_are_parsed_or_refused_clearly(spec, words):
    if words is None:
        assert [h.name for h in parse_hosts(spec)] == ["h1"]
        return
    with pytest.raises(LabkitError, match=words):
        parse_hosts(spec)


def test_a_failed_host_is_explained_by_its_exit_code_and_output():
    assert explain_failure(255, ["ssh: connect to host h2 port 22: Connection refused"], "py") == (
        "ssh failed (exit 255): ssh: connect to host h2 port 22: Connection refused")
    assert "ssh-keyscan" in explain_failure(255, ["Host key verification failed."], "py")
    assert "--workdir" in explain_failure(127, ["env: 'py': No such file or directory"], "py")
    summary = ["Root Cause (first observed failure):", "[0]:", "  host      : h2",
               "  rank      : 2 (local_rank: 0)", "  exitcode  : 1 (pid: 9320) ", "====="]
    assert explain_failure(1, summary, "py") == ("torchrun exited with code 1: rank 2 (local_rank: 0) "
                                      "exited with code 1 (its output is above)")
    gloo = ["RuntimeError: Gloo connectFullMesh failed with [pair.cc:152] timed out connecting: "
            "SO_ERROR: Connection refused, remote=[127.0.1.1]:8076", *summary]
    assert "GLOO_SOCKET_IFNAME" in explain_failure(1, gloo, "py")
    assert explain_failure(1, [], "py") == "torchrun exited with code 1"


def _stub(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_ssh_remote_command_survives_a_real_shell(tmp_path):
    """The remote string, run by a shell as sshd would, gives the interpreter exactly our argv
    (an argv printer stands in for Python: this checks quoting, nothing else)."""
    printer = _stub(tmp_path / "bin", "python", 'printf "%s\\n" "PWD=$PWD" "GREETING=$GREETING" "$@"\n')
    workdir = tmp_path / "work dir"
    workdir.mkdir()
    args = ["--name", "it's a b", "$HOME", "*"]
    (command,) = ssh_commands(["h1"], 2, "train.py", args, workdir=str(workdir),
                              env={"GREETING": "hi there"}, run_id="abc123", python=str(printer),
                              rdzv_port=40000)
    out = subprocess.run(["sh", "-c", command[-1]], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[:2] == [f"PWD={workdir}", "GREETING=hi there"]
    assert out[2:] == ["-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
                       "--rdzv-backend=c10d", "--rdzv-endpoint=h1:40000", "--rdzv-id=abc123",
                       "--max-restarts=0", "--local-addr=h1", "--rdzv-conf=is_host=true",
                       "train.py", *args]


def test_remote_command_runs_in_a_scratch_folder_the_cleanup_removes(tmp_path):
    """With a launch mark, the remote command makes a TMPDIR of the launch's own under the
    host's ``$TMPDIR`` (torchrun's log folders go there); the cleanup removes it, and only it."""
    printer = _stub(tmp_path / "bin", "python", '[ -d "$TMPDIR" ] && echo "TMPDIR=$TMPDIR"\n')
    host_tmp = tmp_path / "host tmp"
    host_tmp.mkdir()
    mark = uuid.uuid4().hex
    other = host_tmp / f"{remote.SCRATCH_PREFIX}another-launch"
    other.mkdir()
    (command,) = ssh_commands(["h1"], 1, "train.py", mark=mark, python=str(printer),
                              rdzv_port=40000)
    env = {**os.environ, "TMPDIR": str(host_tmp)}
    out = subprocess.run(["sh", "-c", command[-1]], capture_output=True, text=True, env=env,
                         check=True).stdout.splitlines()
    scratch = host_tmp / f"{remote.SCRATCH_PREFIX}{mark}"
    assert out == [f"TMPDIR={scratch}"] and scratch.is_dir()
    (scratch / "torchelastic_x").mkdir()
    subprocess.run(["sh", "-c", cleanup_script(mark)], env=env, check=True, capture_output=True)
    assert list(host_tmp.iterdir()) == [other]


def test_remote_cleanup_ends_only_the_marked_processes(tmp_path):
    """The cleanup script, run here by sh as it runs on a host: it ends the processes that carry
    the launch's mark, leaves the others, and counts both."""
    mark = uuid.uuid4().hex
    marked = [subprocess.Popen(["sleep", "300"], env={**os.environ, MARK_ENV: mark})
              for _ in range(2)]
    other = subprocess.Popen(["sleep", "300"], env={**os.environ, MARK_ENV: "another-launch"})
    try:
        out = subprocess.run(["sh", "-c", cleanup_script(mark)], capture_output=True,
                             text=True, timeout=60).stdout.split()
        assert out == ["found=2", "left=0"]
        assert all(p.wait(timeout=10) == -signal.SIGTERM for p in marked)
        assert other.poll() is None
        assert subprocess.run(["sh", "-c", cleanup_script(mark)], capture_output=True,
                              text=True).stdout.split() == ["found=0", "left=0"]
    finally:
        for proc in [*marked, other]:
            proc.kill()
            proc.wait()


def test_slurm_script_is_valid_bash_and_runs_torchrun_per_node(tmp_path):
    # A stand-in interpreter: runs the script's free-port probe for real, prints torchrun's
    # arguments instead of starting it.
    bin_dir = tmp_path / "bin"
    probe = f'[ "$1" = -c ] && exec {shlex.quote(sys.executable)} "$@"\n'
    python = _stub(bin_dir, "python", probe + '[ -d "$TMPDIR" ] && tmp=$TMPDIR\n'
                   'printf "%s\\n" "node=$SLURMD_NODENAME" "tmp=$tmp" "$@"\n')
    text = slurm_script(3, 2, "train.py", ["--name", "a b"], partition="gpu", gpus_per_node=2,
                        env={"MSG": "hello world", "QUOTE": "it's"}, job_name="lab",
                        account="proj", output="logs/%j.out", timeout_s=61, python=str(python),
                        workdir=str(tmp_path / "lab dir"))
    path = tmp_path / "job.sbatch"
    path.write_text(text)
    subprocess.run(["bash", "-n", str(path)], check=True)
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    for expected in ("#SBATCH --nodes=3", "#SBATCH --ntasks-per-node=1",
                     "#SBATCH --cpus-per-task=2", f'#SBATCH --chdir="{tmp_path}/lab dir"',
                     "#SBATCH --time=00:02:00", "#SBATCH --partition=gpu",
                     "#SBATCH --account=proj", "#SBATCH --output=logs/%j.out",
                     "#SBATCH --gpus-per-node=2", "#SBATCH --job-name=lab",
                     "export MSG='hello world'",
                     'export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"'):
        assert expected in lines
    # sbatch reads #SBATCH lines only up to the first command
    first_command = lines.index("set -euo pipefail")
    assert all(not line.startswith("#SBATCH") for line in lines[first_command:])
    (srun,) = [line for line in lines if line.startswith("srun ")]
    assert srun.startswith("srun --kill-on-bad-exit=1 --ntasks-per-node=1 ")
    commands = [line for line in lines if not line.startswith("#")]
    assert not [line for line in commands if "torchrun" in line]  # no PATH lookup of torchrun

    # Run it with a stand-in srun that starts the per-node command on two nodes, the first
    # of them the node the script runs on: what does each node's torchrun get?
    _stub(bin_dir, "srun", 'printf "%s\\n" "srun $1 $2" "SRUN_CPUS_PER_TASK=$SRUN_CPUS_PER_TASK" '
          '"MSG=$MSG" "QUOTE=$QUOTE"\nshift 2\n'
          'SLURMD_NODENAME=node-a "$@" && SLURMD_NODENAME=node-b "$@"\n')
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "SLURMD_NODENAME": "node-a", "SLURM_NNODES": "3", "SLURM_JOB_ID": "4242",
           "SLURM_CPUS_PER_TASK": "2", "TMPDIR": str(tmp_path / "node tmp")}
    proc = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True,
                          check=True)
    out = proc.stdout.splitlines()
    banner = out.pop(0)
    match = re.fullmatch(r"labkit: c10d rendezvous on node-a:(\d+)", banner)
    assert match and 0 < int(match[1]) < 65536, banner
    port = match[1]
    common = ["--nnodes=3", "--nproc-per-node=2", "--rdzv-backend=c10d",
              f"--rdzv-endpoint=node-a:{port}", "--rdzv-id=4242", "--max-restarts=0",
              str(tmp_path / "lab dir" / "train.py"), "--name", "a b"]
    assert out[:4] == ["srun --kill-on-bad-exit=1 --ntasks-per-node=1",
                       "SRUN_CPUS_PER_TASK=2", "MSG=hello world", "QUOTE=it's"]
    # each node's agent runs with a TMPDIR of the job's own (torchrun's log folders go
    # there), which exists while it runs and is gone when it exits
    scratch = tmp_path / "node tmp"
    node_a = ["node=node-a", f"tmp={scratch}/labkit-4242-node-a", "-m", "torch.distributed.run",
              "--local-addr=node-a", "--rdzv-conf=is_host=1", *common]
    node_b = ["node=node-b", f"tmp={scratch}/labkit-4242-node-b", "-m", "torch.distributed.run",
              "--local-addr=node-b", "--rdzv-conf=is_host=0", *common]
    assert out[4:] == node_a + node_b
    assert list(scratch.iterdir()) == []

    # A fixed port is written as given; no --time line without a timeout.
    fixed = slurm_script(1, 1, "/srv/train.py", rdzv_port=29500, python="/opt/py/bin/python")
    assert "LABKIT_RDZV_PORT=29500" in fixed.splitlines()
    assert not [line for line in fixed.splitlines() if line.startswith("#SBATCH --time")]
    assert "partition's default time limit" in fixed


@pytest.mark.parametrize("seconds, expected", [
    (1, "00:01:00"), (60, "00:01:00"), (60.5, "00:02:00"), (3600, "01:00:00"),
    (86400, "1-00:00:00"), (90061, "1-01:02:00"),
])
def test_slurm_time_limit_rounds_up_to_whole_minutes(seconds, expected):
    assert slurm.time_limit(seconds) == expected


@pytest.mark.parametrize("kwargs, words", [
    (dict(nnodes=0), "--nnodes"), (dict(nproc_per_node=0), "--nproc-per-node"),
    (dict(timeout_s=0), "--timeout"), (dict(timeout_s=-5), "--timeout"),
    (dict(timeout_s=float("nan")), "--timeout"), (dict(timeout_s=float("inf")), "--timeout"),
    (dict(cpus_per_task=0), "--cpus-per-task"), (dict(rdzv_port=70000), "--rdzv-port"),
    (dict(partition="gpu debug"), "--partition"), (dict(job_name="a\nb"), "--job-name"),
    (dict(env={"BAD-NAME": "1"}), "BAD-NAME"), (dict(script=""), "no training script"),
])
def test_slurm_script_rejects_bad_input_with_a_clear_message(kwargs, words):
    options = {"nnodes": 2, "nproc_per_node": 2, "script": "train.py", **kwargs}
    with pytest.raises(LabkitError, match=re.escape(words)):
        slurm_script(**options)


# --- the worker wrapper, without torchrun --------------------------------------------------------


def test_prefixed_lines_buffers_partial_lines_until_flush():
    target = io.StringIO()
    stream = PrefixedLines(target, "[p] ")
    assert stream.writable() and not stream.isatty()
    assert stream.write("par") == 3
    assert target.getvalue() == ""  # no line yet
    stream.write("tial\nsecond\nthi")
    assert target.getvalue() == "[p] partial\n[p] second\n"
    stream.write("rd\n")
    assert target.getvalue() == "[p] partial\n[p] second\n[p] third\n"
    stream.write("\n")  # an empty line keeps its prefix
    stream.write("tail")
    stream.flush()
    stream.flush()  # nothing left to write twice
    assert target.getvalue().splitlines()[-2:] == ["[p] ", "[p] tail"]
    assert target.getvalue().endswith("[p] tail\n")


WORKER_SCRIPT = """\
import sys

import helper  # the script's own folder is importable, as with torchrun

print("argv", sys.argv[1:], __name__)
print("no newline", end="")
print("to stderr", file=sys.stderr)
mode = sys.argv[1]
if mode == "raise":
    helper.fail()
if mode != "ok":
    sys.exit(int(mode))
"""


@pytest.mark.parametrize(("mode", "code", "error"), [
    ("ok", 0, None),
    ("raise", 1, "KeyError: 'missing'"),
    ("3", 3, "SystemExit: 3"),
    ("0", 0, None),
])
def test_worker_prefixes_output_and_records_failures(tmp_path, mode, code, error):
    write_script(tmp_path, WORKER_SCRIPT)
    write_script(tmp_path, "def fail():\n    return {}['missing']\n", name="helper.py")
    env = {**os.environ, "GROUP_RANK": "1", "RANK": "3", "LABKIT_RUN_DIR": str(tmp_path),
           "TORCHELASTIC_RESTART_COUNT": "2"}
    proc = subprocess.run([sys.executable, "-m", "labkit.runtime.worker", str(tmp_path / "job.py"), mode],
                          env=env, capture_output=True, text=True, cwd=tmp_path.parent)
    assert proc.returncode == code, proc.stderr
    assert proc.stdout.splitlines() == [f"[node1 rank3] argv ['{mode}'] __main__",
                                        "[node1 rank3] no newline"]
    assert all(line.startswith("[node1 rank3] ") for line in proc.stderr.splitlines())
    assert "[node1 rank3] to stderr" in proc.stderr.splitlines()
    recorded = list((tmp_path / "failures").glob("*.json"))
    if error is None:
        assert recorded == []
        return
    assert [p.name for p in recorded] == ["rank3-restart2.json"]
    failure = json.loads(recorded[0].read_text())
    assert (failure["rank"], failure["node"], failure["restart"]) == (3, 1, 2)
    assert failure["error"] == error
    if mode == "raise":
        assert "helper.py" in failure["traceback"] and "job.py" in failure["traceback"]
        assert "worker.py" not in failure["traceback"]
        assert "[node1 rank3] KeyError: 'missing'" in proc.stderr


def test_worker_without_a_script_prints_usage():
    proc = subprocess.run([sys.executable, "-m", "labkit.runtime.worker"], capture_output=True, text=True)
    assert proc.returncode == 2 and "usage" in proc.stderr


def test_leftover_processes_sees_a_marked_process(tmp_path, leftover_processes):
    """The leftover check used above is not vacuous: it finds a live marked process."""
    marked = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            env={**os.environ, "LABKIT_RUN_DIR": str(marked)})
    try:
        found = leftover_processes(marked)
        assert len(found) == 1 and found[0].startswith(f"{proc.pid}: ")
        assert leftover_processes(tmp_path / "other") == []
    finally:
        proc.kill()
        proc.wait()
    assert leftover_processes(marked) == []


@pytest.mark.slow
def test_a_dead_second_node_ends_the_job_without_waiting_for_the_timeout(tmp_path,
                                                                         leftover_processes):
    """Node 1's agent and rank die (SIGKILL); node 0 would wait for it forever. The launcher
    must notice any agent's death, not only the first one's."""
    script = tmp_path / "die.py"
    script.write_text(
        "import time\n"
        "from labkit.runtime.dist import setup\n"
        "from labkit.reliability.faults import kill_node\n"
        "info = setup()\n"
        "if info.node_rank == 1:\n"
        "    kill_node()\n"
        "time.sleep(300)\n"
    )
    result = launch_local(script, nnodes=2, nproc_per_node=1, timeout_s=200, echo=None,
                          run_dir=tmp_path / "run")
    assert not result.timed_out and result.returncode != 0
    assert -9 in result.node_returncodes
    assert not leftover_processes(tmp_path / "run")
