"""The course runner on tiny throwaway notebooks: results, parameters, validation, run folders."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import papermill
import psutil
import pytest

from labkit.course import runner as course
from labkit.errors import ParameterError

KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}


def make_notebook(path: Path, params: str, *cells: str) -> Path:
    """A notebook with a ``parameters`` cell (``params``) followed by ``cells``."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNELSPEC
    first = nbformat.v4.new_code_cell(params)
    first.metadata["tags"] = ["parameters"]
    nb.cells = [first, *(nbformat.v4.new_code_cell(c) for c in cells)]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def make_course(tmp_path: Path) -> Path:
    """repo/notebooks with a notebook that raises (00) and one that writes what it got (01)."""
    nbdir = tmp_path / "repo" / "notebooks"
    make_notebook(nbdir / "00_broken.ipynb", "n = 3", "raise ValueError(f'broken with n={n}')")
    make_notebook(
        nbdir / "01_report.ipynb",
        "n = 3\nlabel = 'workshop'",
        "import json, os, subprocess, sys, tempfile\n"
        "stray = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'],\n"
        "                         start_new_session=True)  # left running on purpose\n"
        "got = {'n': n, 'label': label, 'smoke': os.environ.get('LABKIT_SMOKE'),\n"
        "       'results': os.environ.get('LABKIT_RESULTS_DIR'),\n"
        "       'python': sys.executable, 'cwd': os.getcwd(), 'tmp': tempfile.gettempdir(),\n"
        "       'stray': stray.pid}\n"
        "json.dump(got, open('report.json', 'w'))\n"
        "print(n * 2)",
    )
    return nbdir


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kernel_children() -> list[str]:
    """Command lines of this process's children that are Jupyter kernels."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and "ipykernel" in cmdline:
            found.append(cmdline)
    return found


@pytest.fixture(autouse=True)
def no_kernel_left_behind():
    yield
    if not Path("/proc/self/stat").exists():
        return
    deadline = time.monotonic() + 10
    while kernel_children() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert kernel_children() == []


@pytest.mark.slow
@pytest.mark.notebook
def test_run_reports_each_notebook_and_goes_on_after_a_failure(tmp_path, capsys):
    nbdir = make_course(tmp_path)
    result = course.run_course(nbdir, progress=False)

    run_dir = result.run_dir
    assert run_dir.parent == (tmp_path / "repo" / "runs").resolve()
    assert [(r.notebook, r.status) for r in result.results] == [
        ("00_broken", "failed"),
        ("01_report", "ok"),
    ]
    assert not result.ok
    broken, report = result.results
    assert broken.error == "ValueError: broken with n=3"
    assert report.error is None
    for r in result.results:  # the failed one keeps its partial notebook and HTML too
        assert (run_dir / r.output).is_file() and (run_dir / r.html).is_file()
    executed = nbformat.read(run_dir / "01_report.ipynb", as_version=4)
    assert executed.cells[-1].outputs[0]["text"].strip() == "6"
    assert "broken with n=3" in (run_dir / "00_broken.html").read_text()

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary == result.to_dict()
    assert summary["ok"] is False and summary["smoke"] is False and summary["interrupted"] is None
    assert [n["status"] for n in summary["notebooks"]] == ["failed", "ok"]
    assert summary["notebooks"][1] == {
        "notebook": "01_report",
        "status": "ok",
        "seconds": report.seconds,
        "output": "01_report.ipynb",
        "html": "01_report.html",
        "error": None,
        "missing_programs": [],  # lesson 01 uses no optional program
    }
    assert summary["total_seconds"] >= sum(n["seconds"] for n in summary["notebooks"])
    index = (run_dir / "index.html").read_text()
    assert 'href="01_report.html"' in index and 'href="00_broken.ipynb"' in index
    assert "ValueError: broken with n=3" in index

    # the kernel ran this interpreter, in the notebooks folder, without LABKIT_SMOKE, with a
    # TMPDIR of its own that is gone now, like the process the notebook left running
    got = json.loads((nbdir / "report.json").read_text())
    assert got["python"] == sys.executable
    assert got["cwd"] == str(nbdir.resolve())
    assert got["smoke"] is None
    assert Path(got["tmp"]).parent == Path(tempfile.gettempdir()) and not Path(got["tmp"]).exists()
    assert not _running(got["stray"])

    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("[1/2] 00_broken ") and "failed" in lines[0]
    assert "  01_report left 1 process running: ended" in lines
    assert [line.split()[:2] for line in lines if line.startswith(("00_", "01_"))] == [
        ["00_broken", "failed"], ["01_report", "ok"]]  # the summary table
    assert lines[-1].startswith("1 of 2 FAILED in ")
    assert lines[-1].endswith(f"{run_dir.name}/index.html")


@pytest.mark.notebook
def test_smoke_and_override_parameters_reach_the_kernel(tmp_path, monkeypatch):
    nbdir = make_course(tmp_path)
    (nbdir / "smoke.yml").write_text("00_broken: {}\n01_report:\n  n: 5\n  label: smoke\n")
    # a stale user-level kernelspec that wins the lookup: the runner must not use it
    stale = tmp_path / "user-data" / "kernels" / "python3"
    stale.mkdir(parents=True)
    argv = ["/nonexistent/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (stale / "kernel.json").write_text(json.dumps({"argv": argv, "language": "python"}))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(stale.parents[1]))
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "0")
    monkeypatch.delenv("LABKIT_SMOKE", raising=False)
    out = tmp_path / "my-run"

    result = course.run_course(
        nbdir,
        out=out,
        smoke=True,
        only=["01"],
        parameters_override={"01": {"n": 7}},
        progress=False,
    )

    assert result.ok and result.run_dir == out
    assert [r.notebook for r in result.results] == ["01_report"]
    got = json.loads((nbdir / "report.json").read_text())
    assert (got["n"], got["label"], got["smoke"]) == (7, "smoke", "1")
    assert got["results"] == str(out)  # labkit.course.results writes into the run folder
    assert got["python"] == sys.executable
    assert "LABKIT_SMOKE" not in os.environ  # restored
    assert not (tmp_path / "repo" / "runs").exists()  # `out` is the run folder, no runs/latest
    assert json.loads((out / "summary.json").read_text())["smoke"] is True


@pytest.mark.slow
def test_runs_are_kept_and_latest_points_at_the_newest(tmp_path):
    nbdir = make_course(tmp_path)

    first = course.run_course(nbdir, only=["01_report"], progress=False)
    second = course.run_course(nbdir, only=["01_report"], progress=False)

    runs = tmp_path / "repo" / "runs"
    assert first.run_dir != second.run_dir
    assert first.run_dir.is_dir() and second.run_dir.is_dir()
    assert (runs / "latest").is_symlink()
    assert (runs / "latest").resolve() == second.run_dir
    assert (runs / "latest" / "summary.json").is_file()
    assert sorted(p.name for p in runs.iterdir()) == sorted(
        ["latest", first.run_dir.name, second.run_dir.name]
    )
    if second.run_dir.name.startswith(first.run_dir.name):  # same second: suffixed
        assert second.run_dir.name == first.run_dir.name + "-2"


def test_unknown_parameter_fails_before_anything_runs(tmp_path, monkeypatch):
    nbdir = make_course(tmp_path)
    monkeypatch.setattr(papermill, "execute_notebook", pytest.fail)
    with pytest.raises(ParameterError, match=r"01_report: unknown parameter nn.*n, label"):
        course.run_course(nbdir, parameters_override={"01": {"nn": 4}}, progress=False)
    (nbdir / "smoke.yml").write_text("00_broken: {}\n01_report: {steps: 2}\n")
    with pytest.raises(ParameterError, match="unknown parameter steps"):
        course.run_course(nbdir, smoke=True, progress=False)
    assert not (tmp_path / "repo" / "runs").exists()


def test_smoke_file_must_match_the_notebooks(tmp_path):
    nbdir = make_course(tmp_path)
    with pytest.raises(ParameterError, match="no smoke sizes"):
        course.plan_course(nbdir, smoke=True)
    (nbdir / "smoke.yml").write_text("00_broken: {}\n01_report: {}\n02_gone: {}\n")
    with pytest.raises(ParameterError, match="02_gone names no notebook"):
        course.plan_course(nbdir, smoke=True)
    (nbdir / "smoke.yml").write_text("00_broken:\n")
    with pytest.raises(ParameterError, match="no entry for 01_report"):
        course.plan_course(nbdir, smoke=True)
    (nbdir / "smoke.yml").write_text("00_broken:\n01_report: {n: 1}\n")
    assert course.plan_course(nbdir, smoke=True) == [
        (nbdir / "00_broken.ipynb", {}),
        (nbdir / "01_report.ipynb", {"n": 1}),
    ]


def test_select_by_id_or_name(tmp_path):
    nbdir = make_course(tmp_path)
    notebooks = course.find_notebooks(nbdir)
    assert [p.name for p in notebooks] == ["00_broken.ipynb", "01_report.ipynb"]
    assert course.select(notebooks, None) == notebooks
    assert course.select(notebooks, ["01", "00_broken"]) == notebooks  # course order
    assert course.select(notebooks, ["01_report"]) == notebooks[1:]
    with pytest.raises(ParameterError, match="unknown notebook '07'; known ids: 00, 01"):
        course.select(notebooks, ["07"])
    with pytest.raises(ParameterError, match="unknown notebook"):
        course.run_course(nbdir, only=["01_reprot"], progress=False)
    with pytest.raises(ParameterError, match="not selected"):
        course.plan_course(nbdir, only=["00"], parameters_override={"01": {"n": 1}})


def test_notebook_without_parameters_cell_is_an_error(tmp_path):
    nbdir = make_course(tmp_path)
    nb = nbformat.read(nbdir / "00_broken.ipynb", as_version=4)
    nb.cells[0].metadata["tags"] = []
    nbformat.write(nb, nbdir / "00_broken.ipynb")
    with pytest.raises(ParameterError, match="00_broken: needs exactly one cell tagged"):
        course.check_parameters(nbdir / "00_broken.ipynb", {})
    course.check_parameters(nbdir / "01_report.ipynb", {"n": 1, "label": "x"})


def test_a_parameter_line_papermill_cannot_read_is_an_error(tmp_path):
    path = make_notebook(tmp_path / "00_eq.ipynb",
                         "n = 3  # fine\nwindow_s = 2.0  # W = n windows of this")
    with pytest.raises(ParameterError, match="cannot read the parameter line.*window_s"):
        course.check_parameters(path, {})


def test_load_smoke_parameters(tmp_path):
    path = tmp_path / "smoke.yml"
    path.write_text("# nothing yet\n")
    assert course.load_smoke_parameters(path) == {}
    path.write_text("a: {x: 1}\nb:\n")
    assert course.load_smoke_parameters(path) == {"a": {"x": 1}, "b": {}}
    path.write_text("a: [1, 2]\n")
    with pytest.raises(ParameterError, match="must be a mapping"):
        course.load_smoke_parameters(path)


def test_the_course_smoke_file_names_the_course_notebooks():
    """notebooks/smoke.yml is valid YAML with one mapping per notebook stem."""
    smoke = course.load_smoke_parameters(Path(__file__).parents[1] / "notebooks" / "smoke.yml")
    assert "00_welcome_and_doctor" in smoke
    assert all(isinstance(v, dict) for v in smoke.values())


HOLD = """
import os, pathlib, subprocess, sys, time
from labkit.services import redis_url

detached = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                            start_new_session=True)  # out of the kernel's process group
url = redis_url()  # a private redis-server, started by this kernel
pathlib.Path(ready + ".part").write_text(f"{os.getpid()} {detached.pid}")
os.replace(ready + ".part", ready)
time.sleep(300)
"""
RUN_MARK = "LABKIT_TEST_COURSE_RUN"  # every process of the runner under test inherits it


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_run_and_leaves_nothing_behind(tmp_path, sig, leftover_processes):
    """The runner killed mid-notebook: the kernel, its children and the server it started are
    gone, so are the temp dirs; the run folder says what was interrupted; a clean exit."""
    nbdir, ready, scratch = tmp_path / "notebooks", tmp_path / "ready", tmp_path / "tmp"
    make_notebook(nbdir / "13_hold.ipynb", f"ready = {str(ready)!r}", HOLD)
    make_notebook(nbdir / "14_after.ipynb", "n = 1", "print(n)")
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), RUN_MARK: str(tmp_path),
           "PATH": str(Path(sys.executable).parent)}  # no prometheus, whatever this machine has
    command = [sys.executable, "-m", "labkit", "course", "run", "--notebooks", str(nbdir),
               "--out", str(tmp_path / "run"), "--no-progress"]
    runner = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        while not ready.exists():
            assert runner.poll() is None, runner.communicate()
            time.sleep(0.1)
        kernel, detached = map(int, ready.read_text().split())
        runner.send_signal(sig)
        stdout, stderr = runner.communicate(timeout=120)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.communicate()

    assert runner.returncode == 128 + sig, stdout + stderr
    assert "Traceback" not in stdout + stderr
    assert f"{sig.name}: stopping 13_hold" in stderr
    assert stdout.splitlines()[-1].startswith(f"interrupted by {sig.name} during 13_hold")
    assert leftover_processes(str(tmp_path), name=RUN_MARK) == []
    assert not _running(kernel) and not _running(detached)
    assert list(scratch.iterdir()) == []  # the kernels' TMPDIR, the server's dir, the kernelspec

    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["interrupted"] == sig.name and summary["ok"] is False
    hold, after = summary["notebooks"]
    assert (hold["status"], after["status"]) == ("interrupted", "not run")
    assert hold["error"] == f"interrupted by {sig.name}"
    assert (tmp_path / "run" / hold["output"]).is_file() and after["output"] is None
    assert hold["missing_programs"] == ["prometheus", "promtool"]  # lesson 13's, not on PATH
    index = (tmp_path / "run" / "index.html").read_text()
    assert "interrupted" in index and "not run" in index and "prometheus, promtool" in index
    assert "lesson 13 on this machine: prometheus, promtool not found" in stdout
