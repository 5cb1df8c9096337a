"""Checks of one NCCL value, by kind (``KIND_CHECKS``) or by name (``NAME_CHECKS``), plus the
generic integer / boolean / enum checks every owner uses.

Each check is ``check(var, value, ctx) -> list[Finding]``. They follow NCCL's parsing:
``ncclLoadParam`` reads integers with ``strtoll(value, 0)`` (src/misc/param.cc: no digits reads
as 0), ranges come from each variable's ``Bounds`` (clamps are reported as clamps), levels from
``ncclGetLevel`` and lists from ``parseList`` (see ``syntax``). Host facts are in ``hostfacts``.
"""

from __future__ import annotations

from collections.abc import Callable

from labkit.nccl import hostfacts
from labkit.nccl.context import Context
from labkit.nccl.findings import Edit, Finding, error, info, warning
from labkit.nccl.registry import Variable, source_default
from labkit.nccl.syntax import (
    ALGORITHM_SINCE,
    ALGORITHM_UNTIL,
    ALGORITHMS,
    PATH_NAMES,
    PROTOCOLS,
    SUBSYSTEMS,
    nccl_int,
    parse_int,
    parse_level,
    parse_subsystems,
    parse_token_list,
    torch_bool,
)
from labkit.nccl.variable import NCCL_GITHUB

Check = Callable[[Variable, str, Context], list[Finding]]
PARAM_CC = NCCL_GITHUB + "src/misc/param.cc#L116-L124"
TUNING_CC = NCCL_GITHUB + "src/graph/tuning.cc#L17-L34"
PARSE_LIST = "https://github.com/NVIDIA/nccl/blob/v2.24.3-1/src/graph/tuning.cc#L53-L110"
OLD_PARSE_LIST = "https://github.com/NVIDIA/nccl/blob/v2.23.4-1/src/graph/tuning.cc#L34-L52"
IB_HINT = NCCL_GITHUB + "src/transport/net_ib/common.h#L621-L626"
# From 2.30.3 NCCL_DEBUG_SUBSYS is read by ncclParamBitsetOf: an unknown name fails the whole
# parse (ncclInvalidArgument) and the parameter keeps its default (param.h, loadValue).
BITSET_SINCE = "2.30.3"
BITSET_H = NCCL_GITHUB + "src/include/param/parser_bitset.h#L26-L57"
IB_RETRY = NCCL_GITHUB + "src/transport/net_ib/connect.cc#L16"  # NCCL_PARAM(IbRetryCnt, ..., 7)
LL128_LINE_DATA = 120  # data bytes in one 128-byte LL128 line (the other 8 are its flag)
LL128_ISSUE = "https://github.com/NVIDIA/nccl/issues/1739"
CLAMP_WARNS = {"NCCL_SOCKET_NTHREADS"}  # NCCL prints a WARN line when it clamps these


def _integer(var: Variable, value: str, ctx: Context) -> list[Finding]:
    number = nccl_int(value) if var.owner == "nccl" else parse_int(value)
    if number is None:
        what = ("NCCL's strtoll finds no digits and reads it as 0" if var.owner == "nccl" else
                "PyTorch raises 'Invalid value for environment variable'" if "/c10d/" in var.link
                else "PyTorch fails to parse it as an integer")
        return [error(var.name, f"'{value}' is not an integer: {what}", f"{var.name}: "
                      f"{var.values}", source=PARAM_CC if var.owner == "nccl" else var.link)]
    found = _bounds(var, number, ctx)
    if var.name in ("NCCL_BUFFSIZE", "NCCL_P2P_NET_CHUNKSIZE") and number > 0 \
            and number & (number - 1):
        found.append(info(var.name, f"{number} is not a power of 2 (NCCL's docs recommend powers "
                          "of 2)", source=var.doc))
    if var.name == "NCCL_LL128_BUFFSIZE" and number > 0 and number % LL128_LINE_DATA:
        found.append(warning(
            var.name, f"{number} is not a multiple of 120 bytes: an LL128 line carries 120 bytes "
            "of data and an 8-byte flag, and a buffer that is not whole lines hangs or fails "
            "nccl-tests' data check (NCCL's answer in NVIDIA/nccl#1739)",
            f"{var.name}={number // LL128_LINE_DATA * LL128_LINE_DATA or LL128_LINE_DATA} (a "
            "multiple of 120; 120 x a power of 2 such as 122880), or leave it unset",
            source=LL128_ISSUE))
    if var.name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE") and number == 0:
        found.append(info(var.name, "0 turns the flight recorder off: nothing to dump after a "
                          "hang", "leave it unset (2000 events in torch 2.13)", source=var.link))
    return found


def _bounds(var: Variable, number: int, ctx: Context) -> list[Finding]:
    bounds = var.bounds
    if bounds is None:
        return []
    if ctx.rccl and bounds.high_before:  # channel limits: RCCL's MAXCHANNELS is its own
        return [info(var.name, "RCCL (this config sets RCCL/HSA variables) has its own channel "
                     "limits: NCCL's are not checked", source=var.link)] \
            if bounds.high and number > bounds.high_at(ctx.target.version) else []
    low, high = bounds.low, bounds.high_at(ctx.target.version)
    source = bounds.source or var.link
    if low is not None and number < low:
        what, limit = bounds.below, low
    elif high is not None and number > high:
        what, limit = bounds.above, high
    else:
        return []
    side = "above NCCL's maximum" if limit == high else "below NCCL's minimum"
    on = f" on NCCL {ctx.target.text}" if bounds.high_before and limit == high else ""
    if what == "clamp":
        make = warning if var.name in CLAMP_WARNS else info
        return [make(var.name, f"{number} is {side} {limit}{on}: NCCL clamps it to {limit}",
                     f"{var.name}={limit} says what NCCL uses", source=source)]
    if what == "keep-default":
        return [warning(var.name, f"{number} is below {limit}: NCCL ignores it and keeps its "
                        "default", f"{var.name}: {var.values}", source=source)]
    if what == "infinite":
        return [warning(var.name, f"{number}: NCCL's docs say 0 or >= 32 is an infinite timeout, "
                        "so a lost peer hangs the job instead of failing it",
                        f"{var.name}: {var.values}", source=var.doc)]
    if what == "accepted":
        return [info(var.name, f"{number} is outside the documented {var.values}", source=source)]
    return [error(var.name, f"{number} is out of range ({var.values})", f"{var.name}: "
                  f"{var.values}", source=source)]


def _boolean(var: Variable, value: str, ctx: Context) -> list[Finding]:
    if var.owner != "nccl":
        if torch_bool(value) is None:
            return [error(var.name, f"'{value}' is not a boolean: PyTorch raises 'Invalid value "
                          "for environment variable'", "use 1 or 0", source=var.link)]
        return []
    number, meant = nccl_int(value), torch_bool(value)
    if number is None:
        edit = None if meant is None else Edit("set", str(int(meant)), "NCCL reads integers")
        on_by_default = source_default(var.name, ctx.target.version) == "1"
        effect = "which turns it off (its default is 1)" if on_by_default else \
            "so this does not turn anything on"
        return [error(var.name, f"NCCL reads an integer: strtoll finds no digits in '{value}' "
                      f"and reads 0, {effect}", "use 1 or 0", edit, source=PARAM_CC)]
    if number not in (0, 1):
        return [warning(var.name, f"{number}: only 0 and 1 are documented", "use 1 or 0",
                        source=var.doc)]
    return []


def check_enum(var: Variable, value: str, ctx: Context) -> list[Finding]:
    """``value`` must be one of ``var.choices`` (case-insensitive)."""
    if value.upper() in (c.upper() for c in var.choices):
        return []
    valid = ", ".join(var.choices)
    if var.name == "TORCH_CPP_LOG_LEVEL":
        return [warning(var.name, f"'{value}' is not a level: PyTorch prints that it cannot parse "
                        "it and keeps WARNING", f"one of {valid}", source=var.link)]
    if var.name == "TORCH_DISTRIBUTED_DEBUG":
        return [error(var.name, f"'{value}': importing torch.distributed raises ValueError "
                      "(must be OFF, INFO or DETAIL)", "OFF, INFO or DETAIL", source=var.link)]
    return [error(var.name, f"'{value}' is not one of {valid}", f"{var.name}: {var.values}",
                  source=var.link)]


def _int_enum(var: Variable, value: str, ctx: Context) -> list[Finding]:
    """An NCCL integer with documented values: NCCL reads any integer, only some are meant."""
    number = nccl_int(value)
    if number is None:
        return _integer(var, value, ctx)
    if str(number) not in var.choices:
        return [warning(var.name, f"{number}: only {', '.join(var.choices)} are documented",
                        f"{var.name}: {var.values}", source=var.doc)]
    return []


def _family(var: Variable, value: str, ctx: Context) -> list[Finding]:
    """NCCL compares AF_INET / AF_INET6 with strcmp; anything else is ignored silently."""
    if value in var.choices:
        return []
    fix = next((c for c in var.choices if c == value.upper()), None)
    return [error(var.name, f"'{value}' is neither AF_INET nor AF_INET6 (compared "
                  "case-sensitively): NCCL ignores it and uses either family",
                  "AF_INET or AF_INET6", Edit("set", fix, "upper case") if fix else None,
                  source=var.link)]


def _level(var: Variable, value: str, ctx: Context) -> list[Finding]:
    level = parse_level(value)
    named = ", ".join(var.choices)
    if level.level is None:
        if value.upper() in PATH_NAMES:
            return [error(var.name, f"NCCL compares level names case-sensitively: '{value}' is "
                          "ignored without a word", f"write {value.upper()}",
                          Edit("set", value.upper(), "level names are upper case"),
                          source=var.link)]
        return [error(var.name, f"'{value}' is not a level: NCCL ignores it silently",
                      f"one of {named}", source=var.link)]
    if level.legacy_integer:
        what = f"legacy integer: NCCL reads '{value}' as {level.level}"
        if (nccl_int(value) or 0) > 4:
            what += " (every integer above 4 reads as SYS)"
        if var.name == "NCCL_P2P_LEVEL" and level.level == "SYS":
            what += ", which allows P2P even across CPU sockets (through QPI/UPI)"
        if var.name == "NCCL_P2P_LEVEL":
            what += (". The level caps the GPU distance at which P2P is used (P2P is on by "
                     "default: the setting does not turn it on)")
        what += ". NCCL's docs discourage integers: their meaning changed across versions"
        return [warning(var.name, what, f"write the name: {var.name}={level.level}, or unset it",
                        Edit("set", level.level, f"'{value}' reads as {level.level}"),
                        source=var.doc)]
    if level.level not in var.choices:
        return [info(var.name, f"{level.level} is accepted by NCCL's parser but not documented "
                     f"for {var.name} (documented: {named})", source=var.link)]
    return []


def _known_algorithms(ctx: Context) -> set[str]:
    return {token for token, since in ALGORITHM_SINCE.items() if ctx.target.at_least(since)
            and not (token in ALGORITHM_UNTIL and ctx.target.at_least(ALGORITHM_UNTIL[token]))}


def _token_list(tokens: tuple[str, ...]) -> Check:
    def check(var: Variable, value: str, ctx: Context) -> list[Finding]:
        known = _known_algorithms(ctx) if tokens == ALGORITHMS else {t.lower() for t in tokens}
        display = tokens + (("CollNet",) if "collnet" in known else ())
        parsed = parse_token_list(value, display, known)
        on = f"NCCL {ctx.target.text}"
        checked = f" (checked against {ctx.target.describe()})"
        if ctx.target.at_least("2.24"):
            return [error(var.name, f"{p}: {on} fails communicator init on it (parseList returns "
                          f"ncclInvalidUsage){checked}", f"{var.name}: {var.values}",
                          source=PARSE_LIST) for p in parsed.problems]
        if ";" in value or ":" in value:
            return [warning(var.name, f"the per-collective syntax needs NCCL >= 2.24: {on} splits "
                            "only at ',' and ignores tokens it does not know, so this enables "
                            f"nothing it recognizes{checked}", "a comma list, e.g. Ring,Tree",
                            source=OLD_PARSE_LIST)]
        return [warning(var.name, f"'{token}' is not a token {on} knows: it ignores it "
                        f"silently{checked}",
                        f"{var.name}: {var.values}", source=OLD_PARSE_LIST)
                for token in parsed.unknown]
    return check


def _nthreads(var: Variable, value: str, ctx: Context) -> list[Finding]:
    """getNthreads: not a multiple of 32 -> the maximum; above/below -> clamped (INFO line)."""
    number = nccl_int(value)
    if number is None:
        return _integer(var, value, ctx)
    if number <= 0 or number in (64, 128, 256, 512):
        return []
    if number % 32:
        what = "is not a multiple of 32: NCCL uses its maximum (512) instead"
    elif number > 512:
        what = "is above 512: NCCL uses 512"
    elif number < 64:
        what = "is below 64: NCCL uses 64"
    else:
        return [info(var.name, f"{number} is accepted but not one of the documented 64, 128, "
                     "256, 512", source=var.doc)]
    return [warning(var.name, f"{number} {what}", "64, 128, 256 or 512", source=TUNING_CC)]


def _ib_timeout(var: Variable, value: str, ctx: Context) -> list[Finding]:
    """4.096 us x 2^value per attempt, times NCCL_IB_RETRY_CNT attempts (NCCL's docs)."""
    found = _integer(var, value, ctx)
    number = nccl_int(value)
    if number == 0:
        return [warning(var.name, "0: NCCL's docs say 0 or >= 32 is an infinite timeout, so a "
                        "lost peer hangs the job instead of failing it", "unset it (20)",
                        source=var.doc)]
    if found or number is None or not 1 <= number <= 31:
        return found
    retries = nccl_int(ctx.env.get("NCCL_IB_RETRY_CNT", "7"))
    retries = 7 if retries is None or not 0 <= retries <= 7 else retries
    per_try = 4.096e-6 * 2 ** number
    total = per_try * max(retries, 1)
    arithmetic = (f"4.096 us x 2^{number} = {_duration(per_try)} per attempt, x {retries} "
                  f"retries = {_duration(total)} before NCCL reports a network error" if retries
                  else f"4.096 us x 2^{number} = {_duration(per_try)}, and with "
                  "NCCL_IB_RETRY_CNT=0 no retry: NCCL reports a network error after one wait")
    default = int(source_default(var.name, ctx.target.version) or 20)
    waits = _duration(4.096e-6 * 2 ** default * max(retries, 1))
    if number < 14:
        return [warning(var.name, f"far too short: {arithmetic}. NCCL's default ({default} in "
                        f"NCCL {ctx.target.text}) waits about {waits}; a timeout set too short "
                        "makes NCCL fail with ibv_poll_cq error 12 (retry exceeded)",
                        f"unset it (NCCL's default, {default}) or raise it",
                        Edit("drop", reason=f"{number} is far too short"), source=IB_HINT)]
    if number < min(default, 18):
        return [info(var.name, f"shorter than NCCL's default ({default} in NCCL "
                     f"{ctx.target.text}): {arithmetic}", source=var.doc)]
    return []


def _ib_retry_cnt(var: Variable, value: str, ctx: Context) -> list[Finding]:
    """The QP's retry_cnt (ncclIbQpRts: qpAttr.retry_cnt): how often the adapter resends a
    packet that got no acknowledgement within NCCL_IB_TIMEOUT before the QP fails."""
    found = _integer(var, value, ctx)
    if found or nccl_int(value) != 0:
        return found
    return [warning(var.name, "0: no retransmission at all: the first packet that is not "
                    "acknowledged within NCCL_IB_TIMEOUT puts the queue pair in error, and NCCL "
                    "fails with completion error 12 (retry exceeded) where the default (7) would "
                    "have resent it; a valid value, useful to reproduce that error, not to run",
                    "unset it (NCCL's default, 7)", Edit("drop", reason="0 disables IB retries"),
                    source=IB_RETRY)]


def _duration(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _nccl_debug(var: Variable, value: str, ctx: Context) -> list[Finding]:
    level = value.upper()
    if level in ("INFO", "TRACE"):
        every = " and every call" if level == "TRACE" else ""
        return [warning(var.name, f"{level} is for bring-up and debugging: it logs every init "
                        f"step of every rank{every}",
                        "NCCL_DEBUG=WARN in production; while debugging, INFO narrowed with "
                        "NCCL_DEBUG_SUBSYS (INIT,NET or COLL) and NCCL_DEBUG_FILE=/path/nccl.%h.%p",
                        Edit("set", "WARN", f"{level} is for bring-up only"), source=var.doc,
                        advice=True)]
    if level == "ABORT":
        return [info(var.name, "ABORT is accepted by NCCL's parser but not documented",
                     source=var.link)]
    if level not in var.choices:
        return [error(var.name, f"'{value}' is not a level NCCL knows: it logs nothing",
                      "VERSION, WARN, INFO or TRACE (case does not matter)", source=var.link)]
    return []


def _debug_subsys(var: Variable, value: str, ctx: Context) -> list[Finding]:
    unknown = parse_subsystems(value)
    if unknown and ctx.target.at_least(BITSET_SINCE):  # one unknown name rejects the whole list
        names = ", ".join(f"'{t}'" for t in unknown)
        found = [error(var.name, f"{names} {'is not a subsystem' if len(unknown) == 1 else 'are not subsystems'}"
                       f" NCCL knows, and NCCL {ctx.target.text} then rejects the whole list: it "
                       "logs its default subsystems (INIT, BOOTSTRAP, ENV) instead of these "
                       "(NCCL before 2.30.3 skipped an unknown name)", ", ".join(SUBSYSTEMS),
                       source=BITSET_H)]
    else:
        found = [warning(var.name, f"'{t}' is not a subsystem NCCL knows: NCCL "
                         f"{ctx.target.text} skips it", ", ".join(SUBSYSTEMS), source=var.doc)
                 for t in unknown]
    if ctx.env.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        found.append(info(var.name, "filters INFO output only: without NCCL_DEBUG=INFO it changes "
                          "nothing", source=var.doc))
    return found


def _path(var: Variable, value: str, ctx: Context) -> list[Finding]:
    return hostfacts.output_file(var, value, ctx)


KIND_CHECKS: dict[str, Check] = {
    "int": _integer, "bool": _boolean, "enum": check_enum, "int-enum": _int_enum,
    "family": _family, "level": _level, "hca-list": hostfacts.ib_hca,
    "algo-list": _token_list(ALGORITHMS), "proto-list": _token_list(PROTOCOLS),
    "subsys-list": _debug_subsys, "path": _path, "gloo-ifname": hostfacts.gloo_ifname,
}
NAME_CHECKS: dict[str, Check] = {
    "NCCL_SOCKET_IFNAME": hostfacts.socket_ifname, "NCCL_DEBUG": _nccl_debug,
    "NCCL_TOPO_FILE": hostfacts.topo_file, "NCCL_NTHREADS": _nthreads,
    "NCCL_IB_TIMEOUT": _ib_timeout, "NCCL_IB_RETRY_CNT": _ib_retry_cnt,
}
