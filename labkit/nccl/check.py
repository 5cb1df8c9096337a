"""``check_env``: what each NCCL / torch.distributed variable in an environment really does.

    findings = check_env({"NCCL_P2P_LEVEL": "5"})                       # any host, newest NCCL
    findings = check_env(env, nccl_version="2.21.5", host=Host.local())  # this machine
    findings = check_env(env, interfaces={"lo", "eth0"})                 # nodes the caller knows
    findings = check_env(parsed.env, **parsed.job)                       # what a paste shows

Per variable: empty values, the target release (not read any more / not yet), deprecated names,
no-op values, debug-only variables (or a plugin's documented setting), then the value itself
(``values``, ``torch_values``, ``hostfacts``); then the rules across variables (``rules``). An
error means wrong on any host; facts of a node are checked only when ``host`` describes it. A
value the shell computes (``$VAR``, ``$(cmd)``, backquotes) is not checked as a literal, and a
placeholder in angle brackets (``<IP_of_node_1>``, from a template or a thread) is a warning
that says it is still to be filled in.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Mapping

from labkit.nccl import domains, netnames, pasted, plugin_checks, torch_values, values
from labkit.nccl.baked import Baked, baked_findings
from labkit.nccl.confidence import Doubt, capped
from labkit.nccl.context import Context, Host, detect_plugins, local_hcas, local_interfaces
from labkit.nccl.findings import Edit, Finding, info, warning
from labkit.nccl.loose import LoosePair, loose_findings
from labkit.nccl.names import is_relevant, unknown_variable
from labkit.nccl.registry import ALIASES, REGISTRY, Variable, source_default
from labkit.nccl.rules import RULES
from labkit.nccl.shellwords import computed
from labkit.nccl.syntax import CHOICES, PLACEHOLDER, nccl_int, parse_int
from labkit.nccl.variable import NCCL_DOC
from labkit.nccl.versions import NcclTarget, local_nccl_target

__all__ = ["Host", "check_env", "local_hcas", "local_interfaces", "options_from_args"]

KIND_CHECKS = {**values.KIND_CHECKS, **torch_values.KIND_CHECKS}
NAME_CHECKS = {**values.NAME_CHECKS, **torch_values.NAME_CHECKS, **domains.NAME_CHECKS,
               **netnames.NAME_CHECKS}

PROTO_DOC_NOTE = ("NCCL's docs discourage it except to disable one protocol while a bug is "
                  "suspected")


def debug_note(name: str, value: str, plugins: bool = False) -> str:
    """Why a debug-only setting matters, where NCCL's docs or source say more than their general
    warning about this value: a list that turns LL128 on (parseList sets it to 1, no longer
    the platform-dependent auto 2: src/graph/tuning.cc), IB disabled by any nonzero value (with
    a net plugin in use the rules say what that does instead)."""
    if name == "NCCL_PROTO":
        forced = any((e.split(":")[-1].strip().startswith("^")) != (
            "ll128" in {t.strip().lower() for t in e.split(":")[-1].strip().lstrip("^").split(",")})
            for e in value.split(";") if e.split(":")[-1].strip())
        return PROTO_DOC_NOTE + ("; this list turns LL128 on even where NCCL would leave it "
                                 "off, and the docs warn that LL128 on a platform that does "
                                 "not support it can corrupt data" if forced else "")
    if name == "NCCL_IB_DISABLE" and nccl_int(value) and not plugins:
        return f"={value} makes NCCL use IP sockets instead of InfiniBand/RoCE"
    return ""


PYTORCH_RENAME = ("renamed to {new}; PyTorch still reads the old name and warns 'Environment "
                  "variable {old} is deprecated; use {new} instead'")


def check_env(env: Mapping[str, str], *, nccl_version: str | NcclTarget | None = None,
              host: Host | None = None, interfaces: Iterable[str] | None = None,
              hcas: Iterable[str] | None = None,
              runs: frozenset[str] | None = None, nodes: int | None = None,
              tilde: Iterable[str] = (), nets: Iterable[tuple[str, str]] = (),
              loose: Iterable[LoosePair] = (), baked: Iterable[Baked] = (),
              doubtful: Iterable[Doubt] = (),
              twice: Iterable[tuple[str, tuple[str, ...], int]] = ()) -> list[Finding]:
    """Findings for every relevant variable of ``env``, then for combinations of them.

    ``nccl_version``: the NCCL release to check against (default: the newest known).
    ``host``: the node the config runs on, when known (``Host.local()`` for this machine);
    ``interfaces`` / ``hcas`` describe one without files. Without either, node facts
    (interfaces, HCAs, files) are reported as infos to check on the node. What a paste shows
    of the job (``ParsedEnv.job``): ``runs``, the collectives the job is known to run only (a
    pasted benchmark); ``nodes``, how many nodes it spans; ``tilde``, the variables whose
    opening ``~`` the shell expands (else a ``~`` reaches the process as it is); ``nets``, the
    networks NCCL's own log shows in use, each with the line that shows it; ``loose``, pairs
    read loosely (``labkit.nccl.loose``), checked by name and value but never above a warning;
    ``baked``, defaults Python source sets for its users (``labkit.nccl.baked``): an interface or
    HCA name there is a warning, not a host fact; ``doubtful``, variables whose value an unsure
    read took with another language's syntax in it: at most warnings
    (``labkit.nccl.confidence``, which decides every such cap); ``twice``, variables one command
    sets to different values (name, values, line): a warning each.
    """
    if host is None and (interfaces is not None or hcas is not None):
        host = Host.described(interfaces, hcas)
    target = nccl_version if isinstance(nccl_version, NcclTarget) else \
        NcclTarget.newest() if nccl_version is None else \
        NcclTarget.parse(nccl_version, "as asked")
    ctx = Context(env, target, host, detect_plugins(env, tuple(nets)), runs, nodes,
                  frozenset(tilde))
    findings: list[Finding] = []
    for name, value in env.items():
        findings += _check_one(name, value, ctx)
    for rule in RULES:
        findings += rule.apply(ctx)
    findings = capped(baked_findings(baked, ctx, findings), doubtful) + \
        loose_findings(loose, ctx, _check_one) + _set_twice(twice)
    for finding in findings:  # --fix must not keep an error: comment the line out, saying why
        if finding.severity == "error" and finding.edit is None and finding.variable in env:
            finding.edit = Edit("comment", reason=_short(finding.message))
    return findings


def _set_twice(twice: Iterable[tuple[str, tuple[str, ...], int]]) -> list[Finding]:
    """A variable one command sets to different values: one of the settings does nothing, and
    the command does not say which was meant."""
    found = []
    for name, vals, line in twice:
        if not is_relevant(name):
            continue
        times = "twice" if len(vals) == 2 else f"{len(vals)} times"
        shown = ", ".join(repr(v) for v in vals)
        found.append(warning(name, f"set {times} in one command (line {line}) to different values "
                             f"({shown}): only one of them reaches the process, and the command "
                             "does not say which one was meant",
                             f"keep the one you mean: {name}={vals[-1]} or {name}={vals[0]}",
                             source=REGISTRY[name].link if name in REGISTRY else NCCL_DOC))
    return found


def _not_a_value_yet(value: str) -> str:
    """What ``value`` holds in place of a value, or "": a placeholder in angle brackets
    (``<IP_of_node_1>``) or a usage pattern (``[INIT|COLL|NET]``, or what a shell leaves of one
    when it reads the first ``|`` as a pipe: ``[INIT``)."""
    if hole := PLACEHOLDER.search(value):
        return (f"'{hole.group()}' is a placeholder (text in angle brackets, as templates and "
                "examples write what to fill in)")
    if choices := CHOICES.search(value):
        return (f"'{choices.group()}' is a usage pattern (alternatives in brackets, as docs "
                "write 'one of these')")
    if value[:1] in "[{" and not any(c in value for c in "]}"):
        return (f"'{value}' is a usage pattern like [A|B|C] cut at its first '|', which a shell "
                "reads as a pipe")
    return ""


def _check_one(name: str, value: str, ctx: Context) -> list[Finding]:
    """Findings for one variable and its value, by name and by value (no rules)."""
    var = REGISTRY.get(name)
    return unknown_variable(name, ctx) + pasted.check_other(name, value) if var is None else \
        _with_source(_check_variable(var, value, ctx), var)


def _short(message: str, limit: int = 72) -> str:
    """The first clause of a message, for the comment --fix writes next to a line."""
    head = re.split(r"[:;(]", message, maxsplit=1)[0].strip()
    return head if len(head) <= limit else head[:limit - 3].rstrip() + "..."


def options_from_args(args: argparse.Namespace) -> dict[str, object]:
    """``check_env`` keywords for ``labkit nccl check``: this machine's host and NCCL release for
    the live environment or ``--this-host``, else any host and the newest (or given) release."""
    here = not getattr(args, "env_file", None) or getattr(args, "this_host", False)
    version = getattr(args, "nccl_version", None)
    target = NcclTarget.parse(version, "--nccl-version") if version else \
        local_nccl_target() if here else NcclTarget.newest()
    return {"nccl_version": target, "host": Host.local() if here else None}


def _with_source(found: list[Finding], var: Variable) -> list[Finding]:
    for finding in found:
        finding.source = finding.source or var.link
    return found


def _check_variable(var: Variable, value: str, ctx: Context) -> list[Finding]:
    if value == "":
        return plugin_checks.empty(var, ctx) or [
            info(var.name, "empty: treated as unset", "remove the line",
                 Edit("drop", reason="empty, treated as unset"))]
    version = _version_facts(var, ctx)
    if version is not None:
        return version
    found = _deprecation(var, value, ctx)
    damaged = pasted.check(var, value)  # a Markdown link, a URL, HTML ... in a file name
    if damaged:
        return found + damaged
    shell = computed(value)
    if shell:
        return found + [info(var.name, f"'{value}' is {shell}: its value is not checked here")]
    unfilled = _not_a_value_yet(value)
    if unfilled:
        return found + [warning(var.name, f"{unfilled}, not a value: fill it in before running; "
                                "as written the process gets it literally",
                                f"{var.name}: {var.values}", source=var.link, advice=True)]
    if _is_default(var, value, ctx):
        only = "; only =1 acts" if var.kind == "bool" and var.owner == "nccl" and value != "1" \
            else ""
        return found + [info(var.name, f"no-op: the default{only}", "remove the line",
                             Edit("drop", reason=f"no-op, the default{only}"), source=var.doc)]
    plugin = ctx.plugin_setting(var.name)
    if plugin:
        found.append(info(var.name, f"{plugin.plugin.title}'s documented configuration sets it "
                          f"({plugin.evidence}): keep it as the vendor sets it"
                          + (" (NCCL lists it under Debugging)" if var.debug_only else ""),
                          source=plugin.plugin.source))
    elif var.debug_only:
        note = debug_note(var.name, value, bool(ctx.plugins))
        found.append(warning(var.name, "debug-only: NCCL lists it under Debugging: fine for an "
                             "experiment or as a workaround, but keeping it set may cause "
                             "sub-optimal behavior, crashes or hangs as NCCL changes"
                             + (f"; {note}" if note else ""),
                             "use it for an experiment or a workaround, then remove it",
                             Edit("comment", reason="debug-only"), source=var.doc,
                             advice=True))
    special = plugin_checks.check(var, value, ctx)
    if special is not None:
        return found + special
    check = NAME_CHECKS.get(var.name) or KIND_CHECKS.get(var.kind)
    return found + (check(var, value, ctx) if check else [])


def _version_facts(var: Variable, ctx: Context) -> list[Finding] | None:
    """A variable the target NCCL release no longer reads, or does not read yet."""
    if var.owner != "nccl":
        return None
    target, on = ctx.target, f"NCCL {ctx.target.text}"
    if var.removed and target.at_least(var.removed):
        replacement = var.deprecated_by or ""
        hint = var.successor or replacement
        text = (f"{on} no longer reads it: not read since {var.removed}, so the setting does "
                f"nothing" + (f"; use {hint}" if hint else ""))
        renamed = replacement and _reads(replacement, ctx) and var.kind == REGISTRY[
            replacement].kind
        edit = Edit("drop", reason=f"{replacement} is set") if renamed and replacement in \
            ctx.env else Edit("rename", replacement, f"renamed from {var.name}") if renamed \
            else Edit("comment", reason=f"not read since NCCL {var.removed}")
        return [warning(var.name, text + f" (checked against {target.describe()})",
                        f"use {hint}" if hint else "remove it", edit, source=var.link)]
    if var.introduced and not target.at_least(var.introduced):
        return [warning(var.name, f"{on} does not read it yet: NCCL reads it from "
                        f"{var.introduced} on (checked against {target.describe()})",
                        f"upgrade NCCL to {var.introduced} or later, or drop it",
                        source=var.link)]
    return None


def _reads(name: str, ctx: Context) -> bool:
    var = REGISTRY.get(name)
    return var is not None and (var.introduced is None or ctx.target.at_least(var.introduced)) \
        and not (var.removed and ctx.target.at_least(var.removed))


def _deprecation(var: Variable, value: str, ctx: Context) -> list[Finding]:
    new = var.deprecated_by
    if var.owner == "pytorch" and new:
        edit = Edit("drop", reason=f"{new} is set") if new in ctx.env else \
            Edit("rename", new, f"renamed from {var.name}")
        return [warning(var.name, PYTORCH_RENAME.format(new=new, old=var.name), f"use {new}",
                        edit, source=var.link)]
    if var.owner != "nccl" or not (var.deprecated or new):
        return []
    if var.deprecated and not ctx.target.at_least(var.deprecated):
        return []
    if var.deprecated_values and value.strip().upper() not in var.deprecated_values:
        return []  # only some values are deprecated (NCCL_LAUNCH_MODE=GROUP)
    if new and not _reads(new, ctx):
        return []
    since = f" since {var.deprecated}" if var.deprecated else ""
    plugin = ctx.plugin_setting(var.name)
    if new and var.name in ALIASES:
        text = (f"old name of {new} (NCCL's docs: still works as an alias, but is ignored if "
                f"{new} is set)")
        edit = Edit("drop", reason=f"{new} is set") if new in ctx.env else \
            Edit("rename", new, f"renamed from {var.name}")
    elif new:
        text = (f"deprecated{since} in favor of {new} (NCCL's docs; still read; if both are "
                "set the most restrictive wins)")
        edit = Edit("drop", reason=f"{new} is set") if new in ctx.env else \
            Edit("rename", new, f"renamed from {var.name}")
    else:
        what = f"{value.strip().upper()} is " if var.deprecated_values else ""
        text = f"{what}deprecated{since} (NCCL's docs); NCCL {ctx.target.text} still reads it" + \
            (f"; use {var.successor}" if var.successor else "") + \
            (f"; the default is {var.default}" if var.deprecated_values else "")
        edit = None
    if plugin:
        return [info(var.name, text, "", source=var.doc)]
    return [warning(var.name, text, f"use {new or var.successor or 'the default'}", edit,
                    source=var.doc)]


def _is_default(var: Variable, value: str, ctx: Context) -> bool:
    if ctx.plugin_setting(var.name):
        return False  # the plugin may set another value; the user's line overrides it
    literal = source_default(var.name, ctx.target.version) if var.owner == "nccl" else None
    if literal in (None, "-1", "-2") and re.fullmatch(r"-?\d+|[A-Z][A-Z0-9_,]*", var.default):
        literal = var.default
    if literal is None:
        return False
    if literal.lstrip("-").isdigit():
        number = nccl_int(value) if var.owner == "nccl" else parse_int(value)
        return number is not None and str(number) == literal
    return value.upper() == literal

