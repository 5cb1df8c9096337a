"""Text pasted into a file or library name that cannot be what was meant.

Web pages, chat tools and word processors change what an author typed: a Markdown renderer turns
``libnccl-net.so`` into the link ``[libnccl-net.so](http://libnccl-net.so)``, a page keeps its HTML
(``<code>``, ``&amp;``), an editor puts typographic quotes or dashes where ``"`` and ``-`` were
typed, a narrow column shortens a path with an ellipsis, and text copied from a page carries
invisible characters. None of that is a character a file or library name on a node has, and the
process gets it as written: the shell removes only its own quotes.

``check(var, value)`` looks at the variables NCCL passes to ``fopen`` or ``dlopen`` as they are
(``OPENED``: how NCCL opens each one and what it does when that fails, from NCCL 2.30.7's source)
and at any other file or library variable of the registry (kinds ``path``, ``input-path``,
``library``); ``check_other(name, value)`` at ``LD_LIBRARY_PATH`` and ``LD_PRELOAD``, which the
dynamic loader reads (ld.so(8)). A finding is a warning: the name cannot be right, but what the
author meant is a guess (the fix offered is the text the damage came from, where it shows).
"""

from __future__ import annotations

import html
import re

from labkit.nccl.findings import Edit, Finding, warning
from labkit.nccl.variable import NCCL_GITHUB, Variable

PLUGIN = NCCL_GITHUB + "src/plugin/"
LD_SO = "https://man7.org/linux/man-pages/man8/ld.so.8.html"
_DLOPEN = "passes it to dlopen as it is (a name without '/' is also tried as libnccl-{kind}-<name>.so)"
_LIST = "splits it at commas and passes each name to dlopen as it is (a name without '/' is " \
    "also tried as libnccl-{kind}-<name>.so)"
# name -> (how NCCL opens it, what it does when that fails, source)
OPENED: dict[str, tuple[str, str, str]] = {
    "NCCL_NET_PLUGIN": (_LIST.format(kind="net"), "NCCL logs only an INFO 'NET/Plugin: Could not "
                        "find' line and goes on with its internal IB and Socket transports: the "
                        "plugin is never loaded", PLUGIN + "net.cc#L254-L305"),
    "NCCL_TUNER_PLUGIN": (_DLOPEN.format(kind="tuner"), "NCCL logs an INFO line and takes the "
                          "net plugin's tuner, or its own tuning", PLUGIN + "tuner.cc#L58-L69"),
    "NCCL_PROFILER_PLUGIN": (_DLOPEN.format(kind="profiler"), "NCCL logs an INFO line and loads "
                             "no profiler (or the net plugin's)", PLUGIN + "profiler.cc#L58-L70"),
    "NCCL_ENV_PLUGIN": (_DLOPEN.format(kind="env"), "NCCL logs an INFO line and loads no "
                        "environment plugin", PLUGIN + "env.cc#L42-L52"),
    "NCCL_GIN_PLUGIN": (_LIST.format(kind="gin"), "NCCL logs an INFO line and loads no such "
                        "plugin", PLUGIN + "gin.cc#L203-L229"),
    "NCCL_RMA_PLUGIN": (_LIST.format(kind="rma"), "NCCL logs an INFO line and loads no such "
                        "plugin", PLUGIN + "rma.cc#L166-L191"),
    "NCCL_IBVERBS_LIB": ("passes it to dlopen as it is", "NCCL logs an INFO 'Count not open' "
                         "line and opens libibverbs.so (or .so.1) instead",
                         NCCL_GITHUB + "src/misc/ibvsymbols.cc#L78-L86"),
    "NCCL_TOPO_FILE": ("opens it with fopen as it is", "NCCL logs an INFO 'Could not open XML "
                       "topology file' line and detects the topology itself",
                       NCCL_GITHUB + "src/graph/xml.cc#L409-L417"),
    "NCCL_CONF_FILE": ("opens it with fopen as it is", "NCCL reads no setting from it, without "
                       "a word (and no longer reads ~/.nccl.conf either)",
                       NCCL_GITHUB + "src/misc/param.cc#L27-L29"),
    "NCCL_DEBUG_FILE": ("opens it with fopen(..., \"w\") after replacing %h and %p", "the log "
                        "stays on stdout", NCCL_GITHUB + "src/debug.cc#L236-L245"),
    "NCCL_TOPO_DUMP_FILE": ("opens it with fopen(..., \"w\")", "NCCL logs an INFO 'Unable to "
                            "open' line and dumps nothing", NCCL_GITHUB + "src/graph/xml.cc#L295-L300"),
    "NCCL_GRAPH_DUMP_FILE": ("opens it with fopen(..., \"w\")", "NCCL logs an INFO 'Unable to "
                             "open' line and dumps nothing",
                             NCCL_GITHUB + "src/graph/xml.cc#L295-L300"),
    "NCCL_GRAPH_FILE": ("opens it with fopen as it is", "NCCL WARNs 'Could not open XML graph "
                        "file' and communicator init fails (ncclSystemError)",
                        NCCL_GITHUB + "src/graph/xml.cc#L1254-L1258"),
}
LOADER = {
    "LD_LIBRARY_PATH": ("the dynamic loader splits it at ':' into directories to search for the "
                        "libraries dlopen asks for (NCCL, its net plugin, libibverbs)", "no "
                        "directory has this name, so a library there is not found"),
    "LD_PRELOAD": ("the dynamic loader loads each library it names (split at ':' or blanks) "
                   "into every process", "no library has this name: the loader prints an error "
                   "and preloads nothing"),
}
_FILE_KINDS = {"path", "input-path", "library"}
_LINK = re.compile(r"\[([^\]\n]*)\]\(([^()\s]*)\)")
_HTML = re.compile(r"</?(?:a|code|pre|span|div|p|br|em|strong|b|i|tt|kbd|samp|var|wbr)\b[^<>]*>"
                   r"|&(?:amp|lt|gt|quot|apos|nbsp|#\d+|#x[0-9A-Fa-f]+);", re.IGNORECASE)
_URL = re.compile(r"\b[a-z][a-z0-9+.-]{1,15}://[^\s,;]*", re.IGNORECASE)  # http, s3, file ...
_QUOTES = re.compile("[\u2018\u2019\u201a\u201b\u201c\u201d\u201e\u201f\u00ab\u00bb\u2039"
                     "\u203a\u2032\u2033]")
_ELLIPSIS = re.compile(r"\u2026|(?:^|(?<=[/:]))\.{3,}(?=$|[/:])")
_DASHES = re.compile("[\u2010-\u2015\u2212]")
_INVISIBLE = re.compile("[\u00a0\u00ad\u200b-\u200d\u2060\ufeff]")


def damage(value: str) -> tuple[str, str, str | None] | None:
    """What was pasted into ``value``: (what, the text that shows it, the value without it or
    None when that cannot be told), or None when nothing was."""
    link = _LINK.search(value)
    if link:
        return ("a Markdown link (a renderer made a link of a file name)", link.group(),
                _LINK.sub(lambda m: m.group(1) or m.group(2), value))
    tag = _HTML.search(value)
    if tag:
        return "HTML markup", tag.group(), html.unescape(_HTML.sub(
            lambda m: m.group() if m.group().startswith("&") else "", value))
    url = _URL.search(value)
    if url:
        fixed = value[:url.start()] + url.group()[7:] + value[url.end():] \
            if url.group().lower().startswith("file://") else None
        return "a URL (read as a local path: nothing downloads it)", url.group(), fixed
    for pattern, what, replace in (
            (_QUOTES, "typographic quotes (the shell removes only ' and \")", ""),
            (_DASHES, "a typographic dash where '-' was typed", "-"),
            (_INVISIBLE, "an invisible character (no-break or zero-width space, soft hyphen)",
             ""),
            (_ELLIPSIS, "an ellipsis (the path was shortened for display)", None)):
        found = pattern.search(value)
        if found:
            shown = value[max(0, found.start() - 12):found.end() + 12]
            return what, shown, pattern.sub(replace, value) if replace is not None else None
    return None


def check(var: Variable, value: str) -> list[Finding]:
    """A file or library variable whose value carries pasted text (see the module docstring)."""
    opened = OPENED.get(var.name)
    if opened is None and var.kind not in _FILE_KINDS:
        return []
    how, then, source = opened or ("opens it as a file name", "no file has that name",
                                   var.link)
    reader = {"nccl": "NCCL", "pytorch": "PyTorch", "gloo": "gloo", "torchrun": "torchrun"}.get(
        var.owner) or var.plugin or "its reader"
    return _finding(var.name, value, f"{reader} {how}", then, source)


def check_other(name: str, value: str) -> list[Finding]:
    """``LD_LIBRARY_PATH`` / ``LD_PRELOAD``: what the dynamic loader makes of pasted text."""
    if name not in LOADER:
        return []
    how, then = LOADER[name]
    return _finding(name, value, how, then, LD_SO)


def _finding(name: str, value: str, how: str, then: str, source: str) -> list[Finding]:
    found = damage(value)
    if found is None:
        return []
    what, shown, fixed = found
    edit = Edit("set", fixed, f"without the {what.split(' (')[0]}") if fixed and fixed != value \
        else None
    return [warning(name, f"'{value}' has {what} in it ('{shown}'): {how}, and {then}",
                    f"{name}={fixed}" if edit else f"write the {name} the author meant",
                    edit, source=source)]
