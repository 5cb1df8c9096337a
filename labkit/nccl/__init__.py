"""NCCL and torch.distributed settings: a registry, a checker, env files, and a debug-log reader.

    from labkit.nccl import check_env, parse_env_file, render_exports, parse_debug_log
    env = parse_env_file(open("data/guide_nccl_env.sh").read())
    for finding in check_env(env):
        print(finding.severity, finding.variable, finding.message)

Modules: ``registry`` (the variables, as data: ``registry_nccl`` / ``registry_nccl_debug`` from
NCCL's env page, ``registry_nccl_source`` which releases read what, ``registry_domains`` the
value domains of undocumented ones, ``registry_torch``, ``registry_plugins``, ``registry_oneccl``
oneCCL's own ``CCL_`` names), ``mangled`` (names whose ``NCCL_`` prefix is misspelt:
``CCL_NET_GDR_LEVEL``, ``NCL_DEBUG``, ``nccl_debug``), ``versions`` (the
NCCL release checked against), ``context`` (the host, if known, and the network plugins in use),
``syntax`` (value grammars, mirroring NCCL/PyTorch source), ``values`` / ``torch_values`` /
``hostfacts`` / ``plugin_checks`` / ``domains`` (what NCCL does with a value outside its domain)
/ ``netnames`` (``NCCL_NET`` against the names networks register) / ``pasted`` (a link, URL,
HTML or typographic text pasted into a file or library name) / ``debugfile`` (the
``%`` conversions NCCL_DEBUG_FILE expands) (one value),
``rules`` / ``rules_torch`` (combinations, as data with sources), ``check`` (``check_env``),
``paste`` (``parse_env``: every shape people paste env in, with ``shellwords``, ``commands``,
``dialects`` (the set commands of fish, csh, cmd.exe, setx, launchctl, systemctl ...),
``yamlenv``, ``pydict`` (dict literals), ``pyfields`` (typed class fields), ``mdtable`` (tables
of variables) and ``ncclconf`` (NCCL's config files), merged by ``parsed``; ``loose``, a safety
net that reads names paired with values outside those shapes, checked at most as warnings;
``baked``, interface and HCA names Python code sets as defaults; ``confidence``, which caps a
finding when the read of its value is unsure), ``envsource`` (``read_env_source``: refuses what is not a small text file), ``envfile`` (export
blocks in and out), ``cli`` (``labkit nccl check``), ``debuglog`` (what an
``NCCL_DEBUG=INFO`` log says).
"""

from __future__ import annotations

from labkit.nccl.check import check_env
from labkit.nccl.debuglog import DebugLog, parse_debug_log
from labkit.nccl.envfile import parse_env_file, render_exports
from labkit.nccl.envsource import read_env_source
from labkit.nccl.findings import Edit, Finding
from labkit.nccl.paste import ParsedEnv, parse_env
from labkit.nccl.registry import REGISTRY, Variable

__all__ = ["REGISTRY", "DebugLog", "Edit", "Finding", "ParsedEnv", "Variable", "check_env",
           "parse_debug_log", "parse_env", "parse_env_file", "read_env_source", "render_exports"]
