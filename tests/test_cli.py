"""The ``labkit`` command, run as ``python -m labkit`` in a subprocess, as a user would; checks
that end before anything starts run ``labkit.cli.main`` in this process (the same parser and
checks, without a new Python importing torch for each)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def labkit(*args: str, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "labkit", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def labkit_here(capsys, *args: str) -> tuple[int, str, str]:
    """``labkit ARGS`` in this process: (exit code, stdout, stderr)."""
    from labkit.cli import main

    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_help_lists_the_commands():
    proc = labkit("--help")
    assert proc.returncode == 0, proc.stderr
    for command in ("doctor", "course", "launch", "bench"):
        assert command in proc.stdout


def test_launch_help_names_its_options(capsys):
    code, out, _ = labkit_here(capsys, "launch", "--help")
    assert code == 0 and "--nproc-per-node" in out and "--slurm" in out


PUBLISHES = """\
import os
import sys

from labkit.runtime import publish

print("args", sys.argv[1:])
publish({"rank": int(os.environ["RANK"]), "world": int(os.environ["WORLD_SIZE"]),
         "args": sys.argv[1:]})
"""


@pytest.mark.slow
def test_launch_prints_what_rank0_published(tmp_path, leftover_processes):
    (tmp_path / "job.py").write_text(PUBLISHES)
    mark = uuid.uuid4().hex
    proc = labkit("launch", "--nnodes", "1", "--nproc-per-node", "2", "--timeout", "120",
                  "--env", f"LABKIT_TEST_MARK={mark}", "job.py", "--flag", "a b", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert json.loads(lines[-1]) == {"rank": 0, "world": 2, "args": ["--flag", "a b"]}
    for rank in (0, 1):
        assert f"[node0 rank{rank}] args ['--flag', 'a b']" in lines
    assert leftover_processes(mark, name="LABKIT_TEST_MARK") == []


@pytest.mark.slow
def test_launch_of_a_failing_script_exits_2_with_the_ranks_error(tmp_path):
    (tmp_path / "bad.py").write_text(textwrap.dedent("""\
        def main():
            raise ValueError("cli boom")

        main()
    """))
    proc = labkit("launch", "--nproc-per-node", "1", "--timeout", "120", "bad.py", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "labkit: error: rank 0 (node 0, restart 0) failed: ValueError: cli boom" in proc.stderr
    assert 'bad.py", line 2, in main' in proc.stderr  # that rank's traceback
    assert "Traceback" not in proc.stderr.split("labkit: error:")[0]  # no CLI traceback


@pytest.mark.slow
def test_launch_with_a_missing_script_is_a_clear_error(tmp_path):
    proc = labkit("launch", "--nnodes", "2", "nowhere.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "labkit: error: script not found: nowhere.py"


@pytest.mark.slow
def test_launch_hosts_dry_run_prints_one_ssh_command_per_host(tmp_path):
    proc = labkit("launch", "--hosts", "a,b", "--nproc-per-node", "2", "--workdir", "/srv/lab",
                  "--ssh-port", "2222", "--dry-run", "train.py", "--x", "a b", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    note, *lines = proc.stdout.splitlines()
    assert note.startswith("# ") and "free rendezvous port" in note  # a shell comment
    assert len(lines) == 2
    commands = [shlex.split(line) for line in lines]
    assert [c[-2] for c in commands] == ["a", "b"]
    assert all(c[:2] == ["ssh", "-tt"] and "2222" in c for c in commands)
    remote = shlex.split(commands[0][-1])
    assert remote[:4] == ["cd", "/srv/lab", "&&", "exec"]
    assert "/srv/lab/.venv/bin/python" in remote
    assert "--rdzv-endpoint=a:29400" in remote and "--nnodes=2" in remote
    assert remote[-3:] == ["train.py", "--x", "a b"]
    assert list(tmp_path.iterdir()) == []  # a dry run starts and writes nothing


@pytest.mark.slow
def test_launch_hosts_refuses_a_bad_host_list(tmp_path):
    proc = labkit("launch", "--hosts", "a,a", "--dry-run", "train.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("labkit: error: a host is named twice")


@pytest.mark.slow
def test_launch_slurm_writes_a_batch_script(tmp_path, capsys, monkeypatch):
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "logs").mkdir()
    target = tmp_path / "job.sbatch"
    proc = labkit("launch", "--slurm", str(target), "--nnodes", "3", "--nproc-per-node", "4",
                  "--gpus-per-node", "4", "--cpus-per-task", "8", "--partition", "gpu",
                  "--account", "proj", "--output", "logs/%j.out", "--job-name", "lab",
                  "--timeout", "90", "--env", "MSG=hello world", "train.py", "--lr", "0.1",
                  cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"sbatch {target}" in proc.stdout
    text = target.read_text()
    subprocess.run(["bash", "-n", str(target)], check=True)
    lines = text.splitlines()
    for expected in ("#SBATCH --nodes=3", "#SBATCH --gpus-per-node=4",
                     "#SBATCH --cpus-per-task=8", "#SBATCH --partition=gpu",
                     "#SBATCH --account=proj", "#SBATCH --output=logs/%j.out",
                     "#SBATCH --job-name=lab", "#SBATCH --time=00:02:00",
                     f"#SBATCH --chdir={tmp_path}", "export MSG='hello world'"):
        assert expected in lines
    (srun,) = [line for line in lines if line.startswith("srun ")]
    assert srun.startswith("srun --kill-on-bad-exit=1 ")
    torchrun = lines[lines.index(srun) + 2]
    assert torchrun.startswith(f"  {shlex.quote(sys.executable)} ")
    assert "--nproc-per-node=4" in torchrun
    assert lines[lines.index(srun) + 3] == f"  {tmp_path / 'train.py'} --lr 0.1"

    # What a batch script could not run says so before anything is written.
    for argv, words in ((["missing.py"], "training script missing.py not found"),
                        (["--timeout", "0", "train.py"], "--timeout wants a positive number")):
        monkeypatch.chdir(tmp_path)
        code, _, err = labkit_here(capsys, "launch", "--slurm", str(tmp_path / "bad.sbatch"),
                                   *argv)
        assert code == 2 and words in err, err
        assert "Traceback" not in err and not (tmp_path / "bad.sbatch").exists()


@pytest.mark.slow
def test_bench_launch_json():
    proc = labkit("bench", "launch", "--json", "--repeats", "1", "--nnodes", "1",
                  "--nproc-per-node", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["benchmark"] == "launch" and report["repeats"] == 1
    assert report["labkit_s"] > 0 and report["bare_torchrun_s"] > 0
    assert report["torch_import_s"] > 0
    assert report["labkit_runs_s"] == [report["labkit_s"]]
    assert report["bare_torchrun_runs_s"] == [report["bare_torchrun_s"]]


@pytest.mark.slow
def test_bench_cell_json_measures_cold_and_warm_side_by_side(capsys):
    code, out, err = labkit_here(capsys, "bench", "cell", "--json", "--repeats", "1",
                                 "--nnodes", "1", "--nproc-per-node", "1")
    assert code == 0, err
    report = json.loads(out)
    assert report["benchmark"] == "cell" and report["repeats"] == 1
    assert report["cold_runs_s"] == [report["cold_s"]] and report["warm_runs_s"] == [report["warm_s"]]
    assert report["ratio"] == pytest.approx(report["warm_s"] / report["cold_s"], rel=1e-2)
    assert report["goal_met"] == (report["ratio"] <= 0.1 and report["warm_s"] < 0.5)
    assert report["group_start_s"] > 0


def test_bench_cell_refuses_bad_input_in_one_line(capsys):
    for args, says in ((["--repeats", "0"], "--repeats must be >= 1"),
                       (["--nnodes", "0"], "at least 1 node and 1 rank per node")):
        code, out, err = labkit_here(capsys, "bench", "cell", *args)
        assert (code, out) == (2, "")
        assert err.startswith("labkit: error: ") and says in err and err.count("\n") == 1, err


def test_course_run_unknown_id_lists_the_known_ones(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.chdir(REPO)
    code, stdout, stderr = labkit_here(capsys, "course", "run", "--only", "99", "--out", str(out))
    assert code == 2, stdout + stderr
    assert "labkit: error: unknown notebook '99'" in stderr
    assert re.search(r"known ids: 00, 01\b", stderr), stderr
    assert not out.exists()  # refused before anything ran


@pytest.mark.slow
def test_doctor_json():
    proc = labkit("doctor", "--json", timeout=120)
    assert proc.returncode in (0, 1), proc.stderr  # 1: some check failed on this machine
    checks = json.loads(proc.stdout)
    assert isinstance(checks, list)
    assert all(set(c) == {"name", "ok", "value", "detail"} for c in checks)
    names = [c["name"] for c in checks]
    assert {"python", "torch", "redis", "nats"} <= set(names)
    assert proc.returncode == (0 if all(c["ok"] for c in checks) else 1)


def test_orchestration_commands_are_wired(capsys):
    code, _, err = labkit_here(capsys, "elastic", "--changes", "kill:0@5")
    assert code == 2 and "node 0 hosts the c10d rendezvous store" in err
    code, _, err = labkit_here(capsys, "agents", "status", "--redis", "redis://127.0.0.1:1",
                               "--job", "j")
    assert code == 2 and "127.0.0.1:1" in err
    code, out, _ = labkit_here(capsys, "partition", "election", "--help")
    assert code == 0 and "--rule" in out


def test_checkpoint_cadences_are_checked_before_launch(tmp_path, capsys):
    for command in (["train", "--ckpt-dir", str(tmp_path)], ["elastic"], ["capstone"]):
        code, _, err = labkit_here(capsys, *command, "--checkpoint-every-updates", "0")
        assert code == 2 and "whole number of updates >= 1" in err, err
        code, _, err = labkit_here(capsys, *command, "--checkpoint-every-s", "-1")
        assert code == 2 and "positive number of seconds" in err, err
        code, _, err = labkit_here(capsys, *command, "--checkpoint-every-updates", "5",
                                   "--checkpoint-every-s", "2")
        assert code == 2 and "not allowed with argument" in err, err
