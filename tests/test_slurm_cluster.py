"""``labkit launch --slurm`` on a real Slurm: the written batch script submitted with ``sbatch``.

The cluster lives on this machine (tests/cluster_lab.py): ``slurmctld`` in the ``login``
namespace (where sbatch, squeue and scontrol run), one ``slurmd`` per host namespace, and a
``munged`` of this module's own (its key, socket, pid, log and seed files in the lab's temp
folder; the system's munged is never used). Each host's own name resolves to 127.0.1.1, as on
Debian, so the jobs pass ``GLOO_SOCKET_IFNAME=lab0`` through the script's environment.

CPU binding is on (``task/affinity``, cores by default as many sites configure), so a job
without enough CPUs per task shows it: its ranks share one CPU. The tests share one cluster
(module fixture); after every job, nothing may be left in a host namespace but its slurmd.

The time limit: Slurm's granularity is one minute and the controller checks limits about every
30 s, so enforcing one takes 60-90 s on top of the rest. By default the limit is checked as
Slurm records it (``scontrol show job``: TimeLimit, held so it never starts); with
``LABKIT_SLURM_TIME_LIMIT=1`` a sleeping job is also run until Slurm ends it (about 90 s more).

Needs root, iproute2 and Debian's slurm-wlm and munge; the module is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from cluster_lab import ClusterLab, missing_programs

from labkit.cli import main as labkit_main
from labkit.runtime import netlab

HOSTS = ("h1", "h2")
LOGIN = "login"
PROGRAMS = ("slurmctld", "slurmd", "slurmstepd", "munged", "sbatch", "srun", "squeue",
            "scontrol", "scancel", "sinfo")
# What the submitter's shell has: no venv, so no torchrun anywhere on PATH.
SUBMIT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
        "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
JOB_WAIT_S = 240  # generous cap for one job: every agent and rank imports torch on 2 cores
CLEAN_WAIT_S = 60  # slurmstepd ends shortly after its job leaves the queue
SLOW = os.environ.get("LABKIT_SLURM_TIME_LIMIT", "0") not in ("", "0")


def _why_not() -> str:
    if os.geteuid() != 0:
        return "a Slurm lab needs root (network namespaces, slurmd)"
    ok, why = netlab.available()
    if not ok:
        return f"no lab network here: {why}"
    missing = missing_programs(*PROGRAMS)
    if missing:
        return (f"Slurm/munge not installed ({', '.join(missing)} missing): "
                "apt-get install slurm-wlm munge")
    if len(os.sched_getaffinity(0)) < 2:
        return "the jobs bind 2 CPUs per node: this machine lends this process fewer than 2"
    return ""


WHY = _why_not()
pytestmark = pytest.mark.skipif(bool(WHY), reason=WHY)

# Each rank: one all_reduce over gloo, then one JSON line; the mode says what else to do.
RANK = textwrap.dedent("""\
    import json, os, socket, sys, time
    mode, arg = sys.argv[1], sys.argv[2:]
    host = socket.gethostname()
    if mode == "fail" and host == arg[0]:
        sys.exit(3)  # this node's ranks die before the process group forms
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    total = torch.ones(1)
    dist.all_reduce(total)
    report = {"rank": dist.get_rank(), "world": dist.get_world_size(), "host": host,
              "sum": int(total.item()), "cpus": sorted(os.sched_getaffinity(0))}
    os.write(1, f"RANK {json.dumps(report)}\\n".encode())  # one write: the ranks share a pipe

    def wait_for(path):
        deadline = time.monotonic() + 180
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                sys.exit(f"{path} never appeared")
            time.sleep(0.2)

    if mode == "hold":  # touch arg[0], then stay until arg[1] exists
        open(arg[0], "a").close()
        wait_for(arg[1])
    elif mode == "sleep":
        time.sleep(600)
    dist.destroy_process_group()
""")


class SlurmLab:
    """slurmctld + one slurmd per host + munged, all ended by :meth:`close`."""

    def __init__(self) -> None:
        self.lab = ClusterLab(hosts=HOSTS, login=LOGIN)
        self.slurmd: dict[str, subprocess.Popen] = {}
        self._logs: list[io.IOBase] = []
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    # --- bring-up --------------------------------------------------------------------------

    def _start(self) -> None:
        folder = self.lab.folder
        self.conf = folder / "slurm.conf"
        folder.chmod(0o755)  # munged wants every folder above its socket searchable by all
        key = folder / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self.socket = folder / "munge.socket"
        self._daemon(LOGIN, "munged", [
            "munged", "--foreground", f"--key-file={key}", f"--socket={self.socket}",
            f"--pid-file={folder}/munged.pid", f"--log-file={folder}/munged.log",
            f"--seed-file={folder}/munged.seed"])
        self._wait(lambda: self.socket.exists(), 20, "munged did not create its socket",
                   "munged")
        for sub in ("state", *(f"spool-{h}" for h in HOSTS)):
            (folder / sub).mkdir()
        self.conf.write_text(self._slurm_conf())
        # Slurm 22.05's slurmd loads a cgroup plugin even when no plugin uses cgroups; `ip netns
        # exec` mounts a fresh /sys without them, so autodetection fails: name v1 outright.
        (folder / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
        self.env = {"PATH": SUBMIT_PATH, "SLURM_CONF": str(self.conf), "HOME": str(folder),
                    "LANG": "C.UTF-8"}
        self._daemon(LOGIN, "slurmctld", ["slurmctld", "-D", "-i"])
        for host in HOSTS:
            self.slurmd[host] = self._daemon(host, f"slurmd-{host}", ["slurmd", "-D", "-N", host])
        self._wait(self._nodes_idle, 60, "the nodes did not come up idle", "slurmctld")

    def _slurm_conf(self) -> str:
        folder = self.lab.folder
        nodes = "".join(f"NodeName={h} NodeAddr={self.lab.address(h)} {_hardware()} "
                        "RealMemory=1000 State=UNKNOWN\n" for h in HOSTS)
        return textwrap.dedent(f"""\
            ClusterName=labkit
            SlurmctldHost={LOGIN}({self.lab.address(LOGIN)})
            SlurmUser=root
            SlurmdUser=root
            AuthType=auth/munge
            CredType=cred/munge
            AuthInfo=socket={self.socket}
            StateSaveLocation={folder}/state
            SlurmdSpoolDir={folder}/spool-%n
            SlurmctldPidFile={folder}/slurmctld.pid
            SlurmdPidFile={folder}/slurmd-%n.pid
            SlurmctldLogFile={folder}/slurmctld.log
            SlurmdLogFile={folder}/slurmd-%n.log
            ProctrackType=proctrack/linuxproc
            TaskPlugin=task/affinity
            TaskPluginParam=Cores
            SelectType=select/cons_tres
            SelectTypeParameters=CR_Core
            SchedulerType=sched/builtin
            ReturnToService=2
            MpiDefault=none
            JobAcctGatherType=jobacct_gather/none
            AccountingStorageType=accounting_storage/none
            JobCompType=jobcomp/none
            KillWait=5
            InactiveLimit=0
            MinJobAge=600
            """) + nodes + (
            f"PartitionName=lab Nodes={','.join(HOSTS)} Default=YES DefaultTime=00:30:00 "
            "MaxTime=INFINITE State=UP\n"
            f"PartitionName=debug Nodes={','.join(HOSTS)} MaxTime=INFINITE State=UP\n")

    def _daemon(self, where: str, name: str, command: list[str]) -> subprocess.Popen:
        log = open(self.lab.folder / f"{name}.out", "wb")  # noqa: SIM115 (closed in close())
        self._logs.append(log)
        return self.lab.popen(where, command, env={**os.environ, "SLURM_CONF": str(self.conf)},
                              stdout=log, stderr=log)

    def _nodes_idle(self) -> bool:
        out = self.slurm(["sinfo", "-h", "-N", "-o", "%N %t"]).stdout.split()
        # one line per node and partition
        return set(zip(out[::2], out[1::2], strict=True)) == {(h, "idle") for h in HOSTS}

    def _wait(self, ready, wait_s: float, what: str, log: str) -> None:
        deadline = time.monotonic() + wait_s
        while not ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} within {wait_s:g} s; {log}: {self.tail(log)}")
            time.sleep(0.2)

    def tail(self, name: str, lines: int = 15) -> str:
        for path in (self.lab.folder / f"{name}.log", self.lab.folder / f"{name}.out"):
            if path.exists() and path.stat().st_size:
                return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    # --- using it --------------------------------------------------------------------------

    def slurm(self, command: list[str], cwd: Path | None = None,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """A Slurm command on the login node, as the submitter runs it."""
        return self.lab.run(LOGIN, command, cwd=cwd, env={**self.env, **(env or {})})

    def sbatch(self, script: Path, cwd: Path, *options: str) -> str:
        proc = self.slurm(["sbatch", "--parsable", *options, str(script)], cwd=cwd)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        out = self.slurm(["scontrol", "show", "job", "-o", job_id]).stdout
        return dict(item.split("=", 1) for item in out.split() if "=" in item)

    def wait_state(self, job_id: str, states: set[str], wait_s: float = JOB_WAIT_S) -> dict:
        deadline = time.monotonic() + wait_s
        while True:
            info = self.job(job_id)
            if info.get("JobState") in states:
                return info
            if info.get("JobState") in DONE or time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} not {sorted(states)} after {wait_s} s: "
                                     f"{info.get('JobState')} ({info.get('Reason')})")
            time.sleep(0.5)

    def wait_done(self, job_id: str, wait_s: float = JOB_WAIT_S) -> dict:
        return self.wait_state(job_id, DONE, wait_s)

    def leftovers(self) -> dict[str, list[str]]:
        """Every process in each host namespace but its slurmd."""
        left = {}
        for host in HOSTS:
            assert self.slurmd[host].poll() is None, f"slurmd on {host} exited"
            pids = subprocess.run(["ip", "netns", "pids", self.lab.namespace(host)],
                                  capture_output=True, text=True).stdout.split()
            left[host] = [_describe(pid) for pid in pids if int(pid) != self.slurmd[host].pid]
        return {host: procs for host, procs in left.items() if procs}

    def assert_nothing_left(self) -> None:
        deadline = time.monotonic() + CLEAN_WAIT_S
        while (left := self.leftovers()) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert left == {}, f"left behind after the job: {left}"
        assert job_scratch() == [], "a job's TMPDIR (torchrun's log folders) was left"

    def cancel_all(self) -> None:
        self.slurm(["scancel", "--user=root"])
        deadline = time.monotonic() + CLEAN_WAIT_S
        while self.slurm(["squeue", "-h"]).stdout.strip() and time.monotonic() < deadline:
            time.sleep(0.3)

    def close(self) -> None:
        try:
            if self.slurmd and all(d.poll() is None for d in self.slurmd.values()):
                self.cancel_all()  # let Slurm end its own steps first
                deadline = time.monotonic() + CLEAN_WAIT_S
                while self.leftovers() and time.monotonic() < deadline:
                    time.sleep(0.3)
        except Exception:  # noqa: BLE001 (a broken cluster is still taken down below)
            pass
        try:
            self.lab.close()  # ends the daemons, kills what is left in the namespaces
        finally:
            for log in self._logs:
                log.close()


def job_scratch() -> list[Path]:
    """Each node's ``TMPDIR`` of a job (``labkit-<job id>-<node>``), where torchrun writes its
    log folders; the job's own EXIT trap removes it. The nodes share this machine's folders."""
    roots = {Path(tempfile.gettempdir()), Path("/tmp")}
    return sorted(p for root in roots for host in HOSTS for p in root.glob(f"labkit-*-{host}"))


def _hardware() -> str:
    """This machine's CPUs as slurm.conf spells them (``slurmd -C``): every host is all of it."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True).stdout
    found = dict(re.findall(r"(CPUs|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=(\d+)", out))
    if len(found) == 4:
        return (f"CPUs={found['CPUs']} Sockets={found['SocketsPerBoard']} "
                f"CoresPerSocket={found['CoresPerSocket']} "
                f"ThreadsPerCore={found['ThreadsPerCore']}")
    cpus = os.cpu_count() or 1
    return f"CPUs={cpus} Sockets=1 CoresPerSocket={cpus} ThreadsPerCore=1"


def _describe(pid: str) -> str:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return pid
    return f"{pid} {command.decode(errors='replace').strip()}"


@pytest.fixture(scope="module")
def slurm():
    lab = SlurmLab()
    try:
        yield lab
    finally:
        lab.close()


@pytest.fixture(autouse=True)
def _no_jobs_left_running(slurm):
    yield
    slurm.cancel_all()  # a failed test's jobs must not hold the nodes for the next one


@pytest.fixture
def folders(tmp_path):
    """Where the batch script is written (holds the rank script), where sbatch is run."""
    written, elsewhere = tmp_path / "written", tmp_path / "elsewhere"
    written.mkdir()
    elsewhere.mkdir()
    (written / "rank.py").write_text(RANK)
    return written, elsewhere


def write_job(folder: Path, name: str, *argv: str) -> Path:
    """``labkit launch --slurm NAME ...`` run from ``folder``, as a user would."""
    said = io.StringIO()
    with contextlib.chdir(folder), contextlib.redirect_stdout(said), \
            contextlib.redirect_stderr(said):
        code = labkit_main(["launch", "--slurm", name, "--env", "GLOO_SOCKET_IFNAME=lab0",
                            *argv])
    assert code == 0, said.getvalue()
    return folder / name


def ranks(output: Path) -> list[dict]:
    return [json.loads(m) for m in re.findall(r"RANK (\{[^}]*\})", output.read_text())]


def rendezvous(output: Path) -> str:
    match = re.search(r"^labkit: c10d rendezvous on (\S+)$", output.read_text(), re.M)
    assert match, output.read_text()[-2000:]
    return match[1]


@pytest.mark.slow
def test_job_submitted_from_another_folder_runs_on_both_nodes_with_its_cpus(slurm, folders):
    written, elsewhere = folders
    assert shutil.which("torchrun", path=SUBMIT_PATH) is None
    script = write_job(written, "job.sbatch", "--nnodes", "2", "--nproc-per-node", "2",
                       "--output", "job-%j.out", "rank.py", "plain")
    job_id = slurm.sbatch(Path("..") / written.name / script.name, elsewhere)
    info = slurm.wait_done(job_id)
    output = written / f"job-{job_id}.out"  # --output is relative to --chdir
    assert info["JobState"] == "COMPLETED", output.read_text()[-3000:]
    assert info["WorkDir"] == str(written) and info["CPUs/Task"] == "2"
    seen = ranks(output)
    assert sorted(r["rank"] for r in seen) == [0, 1, 2, 3], output.read_text()[-3000:]
    assert {r["world"] for r in seen} == {4} and {r["sum"] for r in seen} == {4}
    assert sorted(r["host"] for r in seen) == ["h1", "h1", "h2", "h2"]
    # --cpus-per-task 2 (one per rank) reached the step: every rank may use both CPUs
    assert all(len(r["cpus"]) == 2 for r in seen), seen
    assert rendezvous(output).startswith(f"{info['BatchHost']}:")
    slurm.assert_nothing_left()


@pytest.mark.slow
def test_one_node_failing_ends_the_whole_job(slurm, folders):
    written, elsewhere = folders
    script = write_job(written, "fail.sbatch", "--nnodes", "2", "--nproc-per-node", "2",
                       "--output", "fail-%j.out", "rank.py", "fail", "h2")
    job_id = slurm.sbatch(script, elsewhere)
    info = slurm.wait_done(job_id)
    output = (written / f"fail-{job_id}.out").read_text()
    # h1's ranks were waiting for h2's in the process group: srun ended them, not a timeout
    assert info["JobState"] == "FAILED", output[-3000:]
    assert info["ExitCode"] != "0:0"
    assert "STEP" in output and "CANCELLED" in output, output[-3000:]
    slurm.assert_nothing_left()


@pytest.mark.slow
def test_options_reach_slurm_and_the_time_limit_is_whole_minutes(slurm, folders):
    written, elsewhere = folders
    (written / "logs").mkdir()
    timed = write_job(written, "timed.sbatch", "--nnodes", "2", "--timeout", "61",
                      "--partition", "debug", "--account", "lab-acct", "--job-name", "limits",
                      "--output", "logs/%x-%j.out", "rank.py", "plain")
    untimed = write_job(written, "untimed.sbatch", "--nnodes", "1", "rank.py", "plain")
    # Held: Slurm records the job as it would run it, and never starts it.
    timed_id = slurm.sbatch(timed, elsewhere, "--hold")
    untimed_id = slurm.sbatch(untimed, elsewhere, "--hold")
    info = slurm.job(timed_id)
    assert info["TimeLimit"] == "00:02:00"  # 61 s, rounded up to whole minutes
    assert (info["Partition"], info["Account"], info["JobName"]) == ("debug", "lab-acct",
                                                                     "limits")
    assert info["StdOut"] == str(written / "logs" / f"limits-{timed_id}.out")
    assert slurm.job(untimed_id)["TimeLimit"] == "00:30:00"  # the partition's DefaultTime
    slurm.slurm(["scancel", timed_id, untimed_id])


@pytest.mark.slow
@pytest.mark.skipif(not SLOW, reason="Slurm enforces a time limit 60-90 s after the start "
                    "(minute granularity, checked every 30 s): LABKIT_SLURM_TIME_LIMIT=1 runs it")
def test_the_time_limit_ends_a_job_that_runs_past_it(slurm, folders):
    written, elsewhere = folders
    script = write_job(written, "sleep.sbatch", "--nnodes", "2", "--nproc-per-node", "1",
                       "--timeout", "30", "--output", "sleep-%j.out", "rank.py", "sleep")
    job_id = slurm.sbatch(script, elsewhere)
    info = slurm.wait_done(job_id, wait_s=60 + 30 + 120)
    assert info["JobState"] == "TIMEOUT", (written / f"sleep-{job_id}.out").read_text()[-3000:]
    slurm.assert_nothing_left()


@pytest.mark.slow
def test_two_jobs_on_the_same_first_node_keep_to_their_own_rendezvous(slurm, folders):
    written, elsewhere = folders
    a_up, b_up, a_gone = (written / name for name in ("a-up", "b-up", "a-gone"))
    # One rank and CPU per node each, so both fit on the two nodes at once; A ends while B
    # still runs (the old fixed port had B join A's store and die with it).
    first = write_job(written, "a.sbatch", "--nnodes", "2", "--nproc-per-node", "1",
                      "--cpus-per-task", "1", "--output", "a-%j.out", "rank.py", "hold",
                      str(a_up), str(b_up))
    second = write_job(written, "b.sbatch", "--nnodes", "2", "--nproc-per-node", "1",
                       "--cpus-per-task", "1", "--output", "b-%j.out", "rank.py", "hold",
                       str(b_up), str(a_gone))
    a_id = slurm.sbatch(first, elsewhere)
    slurm.wait_state(a_id, {"RUNNING"})
    b_id = slurm.sbatch(second, elsewhere)
    a_info = slurm.wait_done(a_id)
    a_gone.touch()
    b_info = slurm.wait_done(b_id)
    a_out, b_out = written / f"a-{a_id}.out", written / f"b-{b_id}.out"
    assert a_info["BatchHost"] == b_info["BatchHost"]
    assert a_info["JobState"] == "COMPLETED", a_out.read_text()[-3000:]
    assert b_info["JobState"] == "COMPLETED", b_out.read_text()[-3000:]
    assert len(ranks(a_out)) == len(ranks(b_out)) == 2
    assert rendezvous(a_out) != rendezvous(b_out)
    slurm.assert_nothing_left()


@pytest.mark.slow
def test_a_busy_rendezvous_port_fails_the_job_loudly(slurm, folders):
    written, elsewhere = folders
    squatters = []
    port = None
    for host in HOSTS:  # a server on the same port on both nodes, whichever runs the script
        squatter = slurm.lab.popen(host, [sys.executable, "-c", (
            "import socket, sys, time; s = socket.create_server(('', int(sys.argv[1]))); "
            "print(s.getsockname()[1], flush=True); time.sleep(600)"), str(port or 0)],
            stdout=subprocess.PIPE, text=True)
        squatters.append(squatter)
        port = port or int(squatter.stdout.readline())
    try:
        script = write_job(written, "busy.sbatch", "--nnodes", "2", "--nproc-per-node", "2",
                           "--rdzv-port", str(port), "--output", "busy-%j.out", "rank.py",
                           "plain")
        job_id = slurm.sbatch(script, elsewhere)
        info = slurm.wait_done(job_id)
        output = (written / f"busy-{job_id}.out").read_text()
        assert info["JobState"] == "FAILED", output[-3000:]
        assert "EADDRINUSE" in output or "address already in use" in output, output[-3000:]
        assert "RANK " not in output
    finally:
        for squatter in squatters:
            squatter.kill()
            squatter.wait()
    slurm.assert_nothing_left()


@pytest.mark.slow
def test_scancel_leaves_nothing_behind(slurm, folders):
    written, elsewhere = folders
    script = write_job(written, "cancel.sbatch", "--nnodes", "2", "--nproc-per-node", "1",
                       "--output", "cancel-%j.out", "rank.py", "sleep")
    job_id = slurm.sbatch(script, elsewhere)
    output = written / f"cancel-{job_id}.out"
    deadline = time.monotonic() + JOB_WAIT_S
    while len(ranks(output) if output.exists() else []) < 2:  # every rank is up and sleeping
        assert time.monotonic() < deadline, output.read_text()[-3000:]
        assert slurm.job(job_id)["JobState"] not in DONE, output.read_text()[-3000:]
        time.sleep(0.5)
    running = job_scratch()  # each node's agent writes its log folders in the job's TMPDIR
    assert {p.name for p in running} == {f"labkit-{job_id}-{host}" for host in HOSTS}, running
    assert all(any(p.glob("torchelastic_*")) for p in running), running
    slurm.slurm(["scancel", job_id])
    assert slurm.wait_done(job_id)["JobState"] == "CANCELLED"
    slurm.assert_nothing_left()
