"""A real browser on the interactive lab: JupyterLab on loopback with the lab's own kernels,
Debian's Chromium driven headless by Playwright. Notebook 14 run top to bottom, a slider moved,
the plots redrawn; and warm ranks as a learner meets them (a variable shared between cells, a
rank killed and the group started again, Ctrl-C in one line, a kernel restart).

Skips with a reason without the ``playwright`` package or a ``chromium`` binary (``.ci/run``
installs Debian's chromium when it can). Playwright never downloads a browser here: it starts the
system one (``executable_path``) with the network-quiet flags below and a fresh profile.

Both tests share one server and browser (a module fixture). Screenshots land in its temporary
folder; with ``LABKIT_ARTIFACTS`` set (not "0") they are also copied to ``test-artifacts/browser/``
at the repository root (git-ignored).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import find_leftover_processes

from labkit.course.execution import LAB_JUPYTER_PATH
from labkit.course.runner import check_parameters, load_smoke_parameters
from labkit.runtime.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "14_scaling_and_cost.ipynb"
SLIDER = "GPUs"  # the IntSlider of labkit.cost.widgets.widgets_for; a step moves the marked GPU count
TAG = "LABKIT_BROWSER_TEST"  # in the environment of everything this test starts, to find leftovers
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# JupyterLab settings for this run only (a temporary settings dir): every cell stays in the DOM,
# and no news or update check reaches for the network.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false", "checkForUpdates": False},
}

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def with_smoke_parameters(notebook: Path, smoke_file: Path) -> dict:
    """Append the notebook's smoke.yml entry to its ``parameters`` cell, as assignments that
    override the workshop defaults above them (what papermill's injected cell does)."""
    params = load_smoke_parameters(smoke_file).get(notebook.stem, {})
    check_parameters(notebook, params)
    nb = nbformat.read(notebook, as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    lines = [f"{name} = {value!r}" for name, value in params.items()]
    if lines:
        cell.source = cell.source.rstrip("\n") + "\n# smoke sizes (tests/test_browser.py)\n" + (
            "\n".join(lines))
        nbformat.write(nb, notebook)
    return params


def _get(url: str, token: str, method: str = "GET", timeout: float = 5) -> bytes:
    request = urllib.request.Request(url, method=method,
                                     headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


def _tail(path: Path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else "(no log)"


def _wait_for_server(proc: subprocess.Popen, base: str, token: str, log: Path,
                     timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"jupyter lab exited with {proc.returncode}:\n{_tail(log)}")
        try:
            json.loads(_get(f"{base}/api/status?token={token}", token))
            return
        except (OSError, ValueError):
            time.sleep(0.5)
    pytest.fail(f"jupyter lab did not answer /api/status in {timeout:.0f} s:\n{_tail(log)}")


def _stop_server(proc: subprocess.Popen, base: str, token: str) -> None:
    """Ask the server to shut down (it stops its kernels), then terminate, then kill."""
    if proc.poll() is None:
        try:
            _get(f"{base}/api/shutdown", token, method="POST")
        except OSError:
            pass
        for sig, wait_s in ((None, 20), (signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            if sig is not None:
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
            try:
                proc.wait(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
    try:  # whatever else the server's process group still holds
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill(leftovers: list[str]) -> None:
    for line in leftovers:
        try:
            os.kill(int(line.split(":", 1)[0]), signal.SIGKILL)
        except (ProcessLookupError, PermissionError, ValueError):
            pass


# JavaScript run in the page (JupyterLab exposes window.jupyterapp with expose_app_in_browser).
_NOTEBOOK_STATE = """() => {
  const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  if (!panel || !panel.content || !panel.sessionContext) return null;
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  const cells = panel.content.widgets.filter(c => c.model.type === 'code');
  const errors = [];
  for (const [i, c] of panel.content.widgets.entries()) {
    if (c.model.type !== 'code') continue;
    for (const o of c.model.outputs.toJSON()) {
      if (o.output_type === 'error') errors.push(`cell ${i}: ${o.ename}: ${o.evalue}`);
    }
  }
  return {
    path: panel.context.path,
    kernel: kernel ? kernel.status : null,
    cells: cells.length,
    executed: cells.filter(c => c.model.executionCount !== null).length,
    running: cells.filter(c => c.model.executionState === 'running'
                               || (c.promptNode && c.promptNode.textContent.includes('*'))).length,
    errors,
  };
}"""


# The notebook's kernel shut down without the close dialog (commands' "close-and-shutdown" asks).
_SHUTDOWN = "() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()"


def _poll(page, predicate, timeout: float, what: str, interval_ms: int = 500):
    """Evaluate _NOTEBOOK_STATE until ``predicate(state)``; fail with the last state."""
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        state = page.evaluate(_NOTEBOOK_STATE)
        if state is not None and predicate(state):
            return state
        page.wait_for_timeout(interval_ms)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}; last state: {state}")


def _output_images(box) -> list[str]:
    return [img.get_attribute("src") or "" for img in box.locator(".widget-output img").all()]


@dataclass
class Lab:
    """JupyterLab on loopback with the lab's own kernels (labkit loaded, as ``make lab``), and
    one headless Chromium page on it."""

    page: Any
    base: str
    token: str
    root: Path
    tag: str
    tmp: Path
    started: float

    def open(self, name: str) -> None:
        self.page.goto(f"{self.base}/lab/tree/{name}?token={self.token}", wait_until="load")
        _poll(self.page, lambda s: s["path"] == name and s["kernel"] == "idle", 90,
              f"{name} to open with an idle kernel")


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[Lab]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed (pip install -e '.[dev]')")
    chromium = _chromium()
    if chromium is None:
        pytest.skip("no chromium binary on PATH (.ci/run installs Debian's chromium when root)")

    tmp_path = tmp_path_factory.mktemp("browser")
    started = time.monotonic()
    tag = f"{tmp_path}-{uuid.uuid4().hex[:8]}"
    lab_root, home = tmp_path / "lab", tmp_path / "jupyter"
    lab_root.mkdir()
    shutil.copy(ROOT / "notebooks" / NOTEBOOK, lab_root / NOTEBOOK)
    shutil.copy(ROOT / "notebooks" / "smoke.yml", lab_root / "smoke.yml")
    params = with_smoke_parameters(lab_root / NOTEBOOK, lab_root / "smoke.yml")
    print(f"smoke parameters for {NOTEBOOK}: {params}")

    settings = home / "lab-settings"
    for name, values in LAB_SETTINGS.items():
        target = settings / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(values))
    env = {
        **os.environ,
        TAG: tag,
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        # the lab's kernelspec first, as `make lab` puts it: kernels start with labkit loaded
        "JUPYTER_PATH": os.pathsep.join(
            p for p in (str(LAB_JUPYTER_PATH), os.environ.get("JUPYTER_PATH")) if p),
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "IPYTHONDIR": str(home / "ipython"),
        "LABKIT_RESULTS_DIR": str(tmp_path / "results"),  # not runs/interactive in the repo
        "LABKIT_SMOKE": "1",
    }
    port, token = free_port(), uuid.uuid4().hex
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "jupyter-lab.log"
    browser_home = tmp_path / "browser-home"
    (browser_home / "profile").mkdir(parents=True)

    with log.open("w") as log_file:
        server = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
             f"--port={port}", "--ServerApp.port_retries=0",
             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={lab_root}",
             "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
             "--LabApp.check_for_updates_class="
             "jupyterlab.handlers.announcements.NeverCheckForUpdate",
             "--LabApp.extension_manager=readonly",
             *(["--allow-root"] if os.geteuid() == 0 else [])],
            cwd=lab_root, env=env, stdin=subprocess.DEVNULL, stdout=log_file,
            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for_server(server, base, token, log, timeout=60)
        print(f"jupyter lab up on {base} after {time.monotonic() - started:.1f} s")
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                user_data_dir=str(browser_home / "profile"),
                executable_path=chromium, headless=True, args=CHROMIUM_ARGS,
                env={**os.environ, TAG: tag, "HOME": str(browser_home),
                     "XDG_CONFIG_HOME": str(browser_home / "config"),
                     "XDG_CACHE_HOME": str(browser_home / "cache")},
                viewport={"width": 1400, "height": 1000}, timeout=60_000)
            try:
                page = context.pages[0] if context.pages else context.new_page()
                page.set_default_timeout(60_000)
                yield Lab(page, base, token, lab_root, tag, tmp_path, started)
            finally:
                context.close()
    finally:
        _stop_server(server, base, token)
        leftovers = find_leftover_processes(tag, name=TAG)
        _kill(leftovers)
        if os.environ.get("LABKIT_ARTIFACTS", "0") not in ("", "0"):
            kept = ROOT / "test-artifacts" / "browser"
            kept.mkdir(parents=True, exist_ok=True)
            for shot in [log, *tmp_path.glob("*.png")]:
                shutil.copy(shot, kept / shot.name)
            print(f"artifacts copied to {kept}")
        print(f"jupyter lab log: {log}; {time.monotonic() - started:.1f} s in all")
    assert not leftovers, f"processes left running: {leftovers}"
    shutil.rmtree(browser_home, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)


def _screenshot_at_failure(lab: Lab, name: str) -> contextlib.AbstractContextManager:
    @contextlib.contextmanager
    def guard() -> Iterator[Path]:
        shot = lab.tmp / name
        try:
            yield shot
        finally:
            if not shot.exists():
                try:
                    lab.page.screenshot(path=str(shot))
                    print(f"screenshot (at failure): {shot}")
                except Exception:  # noqa: BLE001 - a failing page must not hide the failure
                    pass
    return guard()


def test_notebook_14_sliders_redraw_in_a_real_browser(lab):
    page = lab.page
    with _screenshot_at_failure(lab, "browser-14-scaling-and-cost.png") as screenshot:
        lab.open(NOTEBOOK)
        print(f"notebook open, kernel idle after {time.monotonic() - lab.started:.1f} s")

        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        state = _poll(page, lambda s: s["running"] == 0 and s["kernel"] == "idle"
                      and (s["executed"] == s["cells"] or s["errors"]),
                      150, "all cells to run")
        assert not state["errors"], f"the notebook raised: {state['errors']}"
        print(f"all {state['cells']} code cells ran after {time.monotonic() - lab.started:.1f} s")
        live = " ".join(find_leftover_processes(lab.tag, name=TAG))
        assert "ipykernel" in live and "chromium" in live, (
            f"the leftover scan must see the kernel and the browser: {live}")

        slider = page.locator(".widget-slider").filter(
            has=page.locator(".widget-label", has_text=SLIDER)).first
        slider.wait_for(state="visible", timeout=30_000)
        box = slider.locator("xpath=ancestor::div[contains(@class,'widget-vbox')][1]")
        box.scroll_into_view_if_needed()
        readout = slider.locator(".widget-readout")
        before = {"readout": readout.inner_text(), "images": _output_images(box)}
        assert len(before["images"]) == 2 and all(
            s.startswith("data:image/png") for s in before["images"]), before["readout"]

        # continuous_update=False: the kernel hears of a new value on release; the slider's
        # keyboard steps count as one.
        handle = slider.locator(".noUi-handle")
        handle.focus()
        for _ in range(3):
            handle.press("ArrowRight")
        # Each step is a change, so up to three redraws: wait until the plots differ, the
        # kernel is idle and they stayed the same for one more poll.
        deadline, previous = time.monotonic() + 45, None
        while time.monotonic() < deadline:
            page.wait_for_timeout(500)
            after = {"readout": readout.inner_text(), "images": _output_images(box)}
            settled = after["images"] == previous and (
                page.evaluate(_NOTEBOOK_STATE) or {}).get("kernel") == "idle"
            if settled and after["images"] != before["images"]:
                break
            previous = after["images"]
        box.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot))
        print(f"screenshot: {screenshot}")
        assert after["readout"] != before["readout"], "the slider did not move"
        assert int(after["readout"]) == int(before["readout"]) + 3, after["readout"]
        assert len(after["images"]) == 2 and after["images"] != before["images"], (
            f"the plots were not redrawn after moving {SLIDER!r} from "
            f"{before['readout']} to {after['readout']}")
        _poll(page, lambda s: not s["errors"], 5, "no errors after the slider moved")
        page.evaluate(_SHUTDOWN)


# --- warm ranks, as a learner meets them ----------------------------------------------------------

WARM = "warm_ranks.ipynb"
START = "%torchrun_start --nnodes 2 --nproc-per-node 1 --timeout 300"
WARM_CELLS = [
    START,  # 0: no %load_ext anywhere in this notebook: the lab's kernel loads labkit
    "%%torchrun\nfrom labkit.runtime import dist as lab\ninfo = lab.setup()\nshared = 41",
    "%%torchrun\nprint(f'shared + 1 = {shared + 1} on rank {info.rank}')",  # 2: the same namespace
    "%%torchrun\nimport os, signal, time\nif info.rank == 1:\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    "time.sleep(60)",  # 3: a rank dies: the group ends, with the reason
    START,  # 4: and starts again
    "%%torchrun\nimport pathlib, time\npathlib.Path('in-cell').touch()\ntime.sleep(600)",  # 5: Ctrl-C
    "%torchrun_stop",
    "%%torchrun --nnodes 1 --nproc-per-node 2\nfrom labkit.runtime import dist as lab\n"
    "info = lab.setup()\nprint(f'cold after a restart: rank {info.rank} of {info.world_size}')\n"
    "lab.teardown()",  # 7: after a kernel restart, still no %load_ext
]
# JavaScript: run one cell, read a cell's text outputs and errors, restart or interrupt the kernel.
_RUN_CELL = """(i) => { const p = window.jupyterapp.shell.currentWidget;
  p.content.activeCellIndex = i; window.jupyterapp.commands.execute('notebook:run-cell'); return i; }"""
_CELL_OUTPUT = """(i) => { const c = window.jupyterapp.shell.currentWidget.content.widgets[i];
  const outs = c.model.outputs.toJSON();
  return {count: c.model.executionCount, running: c.model.executionState === 'running',
          text: outs.filter(o => o.output_type === 'stream').map(o => o.text).join(''),
          errors: outs.filter(o => o.output_type === 'error').map(o => ({ename: o.ename,
                  evalue: o.evalue, traceback: o.traceback}))}; }"""
_KERNEL = """(what) => { const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  if (what === 'restart') { k.restart(); } else { k.interrupt(); } return what; }"""


def _run(page, i: int, timeout: float, what: str) -> dict:
    """Run cell ``i`` and wait until it has finished; its outputs."""
    print(f"cell {i}: {WARM_CELLS[i].splitlines()[0]}", flush=True)
    before = page.evaluate(_CELL_OUTPUT, i)["count"]
    page.evaluate(_RUN_CELL, i)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = page.evaluate(_CELL_OUTPUT, i)
        state = page.evaluate(_NOTEBOOK_STATE) or {}
        if out["count"] not in (None, before) and state.get("kernel") == "idle":
            return out
        page.wait_for_timeout(300)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}: {page.evaluate(_CELL_OUTPUT, i)}")


def _error_text(out: dict) -> str:
    return " | ".join(f"{e['ename']}: {e['evalue']}" for e in out["errors"])


def test_warm_ranks_in_a_real_browser(lab):
    """Warm ranks in JupyterLab: two cells share a variable, a killed rank ends the group with a
    clear message and a new one starts, Ctrl-C in a cell is one line, and after a kernel restart
    %%torchrun works without %load_ext; nothing is left (the fixture checks after the server)."""
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(c) for c in WARM_CELLS],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3 (labkit)",
                                 "language": "python"}})  # no kernel picker dialog
    nbformat.write(nb, lab.root / WARM)
    page = lab.page
    with _screenshot_at_failure(lab, "browser-warm-ranks.png") as screenshot:
        lab.open(WARM)
        started = _run(page, 0, 180, "the warm group to start")
        assert not started["errors"] and "warm group up: 2 nodes x 1 rank" in started["text"], started
        assert not _run(page, 1, 60, "the first warm cell")["errors"]
        shared = _run(page, 2, 60, "a cell that reads the first cell's variable")
        assert not shared["errors"], _error_text(shared)
        assert "[node0 rank0] shared + 1 = 42 on rank 0" in shared["text"], shared["text"]
        assert "[node1 rank1] shared + 1 = 42 on rank 1" in shared["text"], shared["text"]

        died = _run(page, 3, 180, "the group to end after a rank died")
        said = _error_text(died)
        assert "rank 1" in said and "%torchrun_start" in said, said  # who, and how to go on
        assert "labkit-fence" not in said, said  # no protocol markers in what a learner reads
        restarted = _run(page, 4, 180, "a new warm group")
        assert not restarted["errors"] and "warm group up" in restarted["text"], restarted

        marker = lab.root / "in-cell"
        page.evaluate(_RUN_CELL, 5)
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            page.wait_for_timeout(200)
        assert marker.exists(), "the cell never started on the ranks"
        page.evaluate(_KERNEL, "interrupt")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            interrupted = page.evaluate(_CELL_OUTPUT, 5)
            if interrupted["errors"] and not interrupted["running"]:
                break
            page.wait_for_timeout(300)
        [error] = interrupted["errors"]
        shown = [line for line in error["traceback"] if line.strip()]
        assert error["ename"] == "Interrupted" and len(shown) == 1, error  # one line, no frames
        assert "Interrupted:" in shown[0] and ("still up" in shown[0] or "none left" in shown[0]), shown
        stopped = _run(page, 6, 120, "%torchrun_stop")
        assert not stopped["errors"] and "warm group" in stopped["text"], stopped

        page.evaluate(_KERNEL, "restart")
        _poll(page, lambda s: s["kernel"] == "idle", 90, "the kernel to restart")
        cold = _run(page, 7, 180, "a cold %%torchrun cell after the restart")
        assert not cold["errors"], _error_text(cold)
        assert "cold after a restart: rank 1 of 2" in cold["text"], cold["text"]
        page.screenshot(path=str(screenshot))
        page.evaluate(_SHUTDOWN)
