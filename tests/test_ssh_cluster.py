"""``labkit launch --hosts`` against a real OpenSSH server on two hosts, with real torchrun.

The hosts are network namespaces with their own hostname and ``/etc/hosts`` (each host's own
name also resolves to 127.0.1.1, as on Debian), an sshd each, and a login node the launch runs
from (``tests/cluster_lab.py``). Every job is 2 hosts x 2 gloo ranks from the lab's own folder,
as the README's command runs it; after every fault (Ctrl-C, SIGTERM, the timeout, an unreachable
host, a host whose script fails before the group forms) no process of the job is left on either
host. Needs root, iproute2 and openssh-server; skipped with the reason otherwise.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cluster_lab import ClusterLab, missing_programs

from labkit.cluster import remote
from labkit.runtime import netlab

OK, WHY = netlab.available()
MISSING = missing_programs("sshd", "ssh", "ssh-keygen", "unshare")
pytestmark = [
    pytest.mark.skipif(not OK, reason=f"no lab network here: {WHY}"),
    pytest.mark.skipif(bool(MISSING), reason=f"needs {', '.join(MISSING)} (openssh-server)"),
]

REPO = Path(__file__).resolve().parents[1]
JOB = """\
import os, socket, sys, time
import torch
import torch.distributed as dist

if sys.argv[1:2] == ["fail-early"] and socket.gethostname() == "h2":
    sys.exit("h2 fails before the group forms")
dist.init_process_group("gloo")
total = torch.tensor([1.0])
dist.all_reduce(total)
print(f"ready rank={dist.get_rank()} world={dist.get_world_size()} host={socket.gethostname()} "
      f"sum={total.item():g}", flush=True)
if sys.argv[1:2] == ["sleep"]:
    time.sleep(600)
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def lab():
    with ClusterLab(("h1", "h2", "h3")) as cluster:  # h3 has no sshd: unreachable
        cluster.ssh_config = cluster.start_sshd(["h1", "h2"])
        yield cluster


@pytest.fixture(autouse=True)
def end_what_is_left(lab):
    """After each test, SIGKILL whatever still runs on the login node and the hosts: a test
    that failed with its job running must not fail the ones after it. The tests themselves
    assert that nothing was left before this runs."""
    yield
    for pids in lab.leftovers(["login", "h1", "h2"]).values():
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def job(lab) -> Path:
    path = lab.folder / "job.py"
    path.write_text(JOB)
    return path


def launch(lab: ClusterLab, hosts: str, *args: str, ssh_config: Path | None = None,
           options: tuple[str, ...] = ()) -> subprocess.Popen:
    """``labkit launch --hosts`` on the login node, from a folder that is not the lab's."""
    command = [
        *lab.prefix("login"), sys.executable, "-m", "labkit", "launch", "--hosts", hosts,
        "--nproc-per-node", "2", "--workdir", str(REPO), "--env", "GLOO_SOCKET_IFNAME=lab0",
        "--ssh-config", str(ssh_config or lab.ssh_config), *options, *args,
    ]
    return subprocess.Popen(command, cwd=lab.folder, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            preexec_fn=default_sigint)


def default_sigint() -> None:
    """In the child: SIGINT as a terminal delivers it (a suite run in the background with
    ``&`` ignores SIGINT, and an ignored signal stays ignored across exec)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Reader:
    """Collects a process's stdout lines in a thread, so a test can wait for some of them."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.lines, self._queue = proc, [], queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, needle: str, count: int, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while sum(line.count(needle) for line in self.lines) < count:
            try:
                line = self._queue.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                line = ""
            if line is None or time.monotonic() > deadline:
                raise AssertionError(f"never saw {count} x {needle!r}:\n" + "\n".join(self.lines))
            self.lines.append(line)

    def finish(self, wait_s: float) -> tuple[int, list[str], str]:
        try:
            code = self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # what it started is ended by end_what_is_left
            raise
        while (line := self._queue.get(timeout=10)) is not None:
            self.lines.append(line)
        return code, self.lines, self.proc.stderr.read()


def no_leftovers(lab: ClusterLab) -> dict[str, list]:
    """What still runs on the hosts, and any launch's scratch folder (its TMPDIR, where
    torchrun writes log folders) left in the hosts' /tmp; the launch must have ended and
    removed it all when it exits."""
    left: dict[str, list] = {host: pids for host, pids in lab.leftovers(["h1", "h2"]).items()
                             if pids}
    if scratch := scratch_folders():
        left["/tmp"] = scratch
    return left


def scratch_folders() -> list[Path]:
    """Launches' TMPDIRs on the hosts (the hosts share this machine's /tmp)."""
    return sorted(Path("/tmp").glob(f"{remote.SCRATCH_PREFIX}*"))


@pytest.fixture(scope="module")
def first_job(lab, job) -> tuple[int, list[str], str, float]:
    """One whole job here: its exit code, output, stderr and seconds (start-up included),
    which the other cases size their waits and the timeout from."""
    started = time.monotonic()
    code, lines, err = Reader(launch(lab, "h1,h2", str(job))).finish(wait_s=600)
    return code, lines, err, time.monotonic() - started


@pytest.fixture(scope="module")
def job_seconds(first_job) -> float:
    code, lines, err, seconds = first_job
    assert code == 0, "\n".join(lines) + err
    return seconds


@pytest.mark.slow
def test_a_two_host_job_runs_as_the_readme_says_and_leaves_nothing(lab, first_job):
    code, lines, err, _ = first_job
    assert code == 0, "\n".join(lines) + err
    ready = [line for line in lines if "ready rank=" in line]
    assert len(ready) == 4, lines
    assert {line.split("host=")[1].split()[0] for line in ready} == {"h1", "h2"}
    assert all("world=4" in line and "sum=4" in line for line in ready)
    for line in ready:  # the host, then the rank's own label from labkit's worker
        host, node_rank = line.split("] ")[0][1:], line.split("] ")[1][1:]
        assert host in ("h1", "h2") and node_rank.startswith("node")
        assert f"rank{line.split('ready rank=')[1].split()[0]}" == node_rank.split()[1]
    assert "remote processes: 0 processes left on h1, h2" in lines
    assert no_leftovers(lab) == {}


@pytest.mark.slow
def test_two_jobs_on_the_same_first_host_get_their_own_rendezvous(lab, job, job_seconds):
    # The second names the hosts by address, as the README's example does: torchrun's own guess
    # of which agent hosts the store compares it with the host's name, which resolves to loopback.
    by_address = ",".join(lab.address(host) for host in ("h1", "h2"))
    readers = [Reader(launch(lab, hosts, str(job))) for hosts in ("h1,h2", by_address)]
    results = [reader.finish(wait_s=600) for reader in readers]
    for code, lines, err in results:
        assert code == 0, "\n".join(lines) + err
        assert "\n".join(lines).count("ready rank=") == 4, "\n".join(lines)
    assert no_leftovers(lab) == {}


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code", "said"), [
    (signal.SIGINT, 130, "labkit: launch interrupted (Ctrl-C)"),
    (signal.SIGTERM, 143, "labkit: launch ended by SIGTERM"),
])
def test_ctrl_c_and_sigterm_end_every_remote_process(lab, job, job_seconds, sig, code, said):
    reader = Reader(launch(lab, "h1,h2", str(job), "sleep"))
    reader.wait_for("ready rank=", 4, wait_s=max(120, 10 * job_seconds))
    assert all(no_leftovers(lab).get(host) for host in ("h1", "h2"))  # ranks run on both
    scratch = scratch_folders()  # one for the launch: both agents' torchrun log folders
    assert len(scratch) == 1 and len(list(scratch[0].glob("torchelastic_*"))) == 2, scratch
    reader.proc.send_signal(sig)
    exit_code, lines, err = reader.finish(wait_s=120)
    assert exit_code == code, err
    assert err.strip().splitlines()[-1] == said
    assert any(line.startswith("remote processes:") and "0 processes left" in line
               for line in lines), lines
    assert no_leftovers(lab) == {}


@pytest.mark.slow
def test_the_timeout_ends_the_job_and_says_what_it_checked(lab, job, job_seconds):
    # Long enough to start the job on this machine (twice one whole job here), short of forever.
    limit = f"{max(10.0, 2 * job_seconds):.0f}"
    proc = launch(lab, "h1,h2", str(job), "sleep", options=("--timeout", limit))
    code, lines, err = Reader(proc).finish(wait_s=600)
    assert code == 2, err
    (message,) = err.strip().splitlines()
    assert message.startswith(f"labkit: error: job still running after its {limit} s timeout;")
    assert message.endswith("0 processes left on h1, h2")
    assert no_leftovers(lab) == {}


@pytest.mark.slow
def test_an_unreachable_host_fails_fast_and_is_named(lab, job, job_seconds):
    code, lines, err = Reader(launch(lab, "h1,h3", str(job))).finish(wait_s=600)
    assert code == 2
    (message,) = err.strip().splitlines()
    assert message.startswith("labkit: error: h3: ssh failed (exit 255):"), message
    assert "could not check h3" in message
    assert no_leftovers(lab) == {}


@pytest.mark.slow
def test_a_script_failing_on_one_host_before_the_group_forms_ends_the_others(lab, job,
                                                                             job_seconds):
    code, lines, err = Reader(launch(lab, "h1,h2", str(job), "fail-early")).finish(wait_s=600)
    assert code == 2
    (message,) = err.strip().splitlines()
    assert message.startswith("labkit: error: h2: torchrun exited with code 1: rank "), message
    assert message.endswith("0 processes left on h1, h2")
    assert any("h2 fails before the group forms" in line for line in lines)
    assert no_leftovers(lab) == {}


@pytest.mark.slow
def test_a_missing_interpreter_is_explained_before_anything_starts(lab, job):
    code, lines, err = Reader(launch(lab, "h1,h2", str(job),
                                     options=("--python", "/nowhere/python"))).finish(wait_s=120)
    assert code == 2
    (message,) = err.strip().splitlines()
    assert message.startswith("labkit: error: h1: not found on the host (exit 127):"), message
    assert "--workdir" in message and "--python" in message
    assert no_leftovers(lab) == {}


@pytest.mark.slow
def test_an_unknown_host_key_says_how_to_fix_it(lab, job):
    bare = lab.folder / "no-known-hosts"
    text = lab.ssh_config.read_text().replace(str(lab.ssh_config.parent / "known_hosts"),
                                              str(lab.folder / "empty_known_hosts"))
    bare.write_text(text)
    code, _, err = Reader(launch(lab, "h1,h2", str(job), ssh_config=bare)).finish(wait_s=120)
    assert code == 2
    (message,) = err.strip().splitlines()
    assert "Host key verification failed" in message and "known_hosts" in message, message
