"""NCCL and torch.distributed settings: a registry, a checker, env files, and a debug-log reader.

    from labkit.nccl import check_env, parse_env_file, render_exports, parse_debug_log
    env = parse_env_file(open("data/guide_nccl_env.sh").read())
    for finding in check_env(env):
        print(finding.severity, finding.variable, finding.message)

Modules: ``registry`` (the variables, as data, with doc links), ``syntax`` (their value grammars,
mirroring NCCL/PyTorch source), ``check`` (``check_env``), ``envfile`` (export blocks in and
out), ``cli`` (``labkit nccl check``), ``debuglog`` (what an ``NCCL_DEBUG=INFO`` log says).
"""

from __future__ import annotations

from labkit.nccl.check import check_env
from labkit.nccl.debuglog import DebugLog, parse_debug_log
from labkit.nccl.envfile import parse_env_file, render_exports
from labkit.nccl.findings import Edit, Finding
from labkit.nccl.registry import REGISTRY, Variable

__all__ = ["REGISTRY", "DebugLog", "Edit", "Finding", "Variable", "check_env", "parse_debug_log",
           "parse_env_file", "render_exports"]
