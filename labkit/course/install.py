"""Installing the optional programs, behind ``labkit doctor --install`` (``make system-deps``):
apt-get as root on Debian and Ubuntu, else the command printed for you to run.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from labkit.course.programs import (
    APT_INSTALL,
    ProgramStatus,
    System,
    install_command,
    unique_in_order,
)
from labkit.errors import LabkitError


@dataclass(frozen=True)
class InstallPlan:
    """What ``labkit doctor --install`` does here: run ``commands`` (root on Debian/Ubuntu),
    or print ``advice`` (the commands for sudo, or what to do on other systems)."""

    packages: tuple[str, ...]
    commands: tuple[tuple[str, ...], ...] = ()
    advice: str = ""

    @property
    def runs(self) -> bool:
        return bool(self.commands)


def plan_install(statuses: Sequence[ProgramStatus], system: System, cluster: bool = False
                 ) -> InstallPlan:
    """The packages of the programs not found (the real-cluster ones only with ``cluster``),
    and how to install them on ``system``."""
    wanted = [s.program for s in statuses if not s.found and (cluster or not s.program.cluster)]
    packages = tuple(unique_in_order(pkg for p in wanted for pkg in p.packages))
    if not packages:
        return InstallPlan((), advice="every optional program is here: nothing to install")
    services = unique_in_order(p.service for p in wanted if p.service)
    if system.installer != "apt":
        advice = install_command([packages], system)
        return InstallPlan(packages, advice=f"install them with: {advice}")
    steps = [("apt-get", "update"), (*APT_INSTALL, *packages)]
    steps += [_stop_service(name) for name in services]
    if system.root:
        return InstallPlan(packages, commands=tuple(steps))
    lines = ["not root, so nothing was installed; run these (the lab starts its own servers, "
             "so the packages' services are stopped):"]
    lines += [f"  sudo {shlex.join(step)}" for step in steps]
    return InstallPlan(packages, advice="\n".join(lines))


def _stop_service(name: str) -> tuple[str, ...]:
    if shutil.which("service") or not shutil.which("systemctl"):
        return ("service", name, "stop")
    return ("systemctl", "stop", name)


def run_install(plan: InstallPlan) -> int:
    """Run the plan's commands in order (apt-get's output shows); 0 when they succeed. Stopping
    a service is best effort (it may not run: containers have no init)."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in plan.commands:
        print(f"$ {shlex.join(command)}", flush=True)
        stopping = command[0] in ("service", "systemctl")
        try:
            done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL,
                                  capture_output=stopping)
        except OSError as exc:
            if stopping:
                continue
            raise LabkitError(f"cannot run {command[0]}: {exc}") from exc
        if done.returncode != 0 and not stopping:
            print(f"labkit: `{shlex.join(command)}` failed with exit code {done.returncode}",
                  file=sys.stderr)
            return done.returncode
    return 0
