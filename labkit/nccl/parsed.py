"""What ``labkit.nccl.paste.parse_env`` returns: every ``Assignment`` in order, merged into one
``ParsedEnv`` the way the process would see it.

In the environment the last assignment wins. Settings written to NCCL's config files (shape
"nccl.conf", ``labkit.nccl.ncclconf``) are merged as NCCL merges them: ``setenv(name, value, 0)``
keeps a variable the environment already has, the user's file (``$NCCL_CONF_FILE`` or
``~/.nccl.conf``) is read before ``/etc/nccl.conf``, and within a file the first line wins. A
file NCCL does not read (``~/.nccl.conf`` while ``NCCL_CONF_FILE`` names another) is left out,
with a note; one it reads only if ``NCCL_CONF_FILE`` names it is kept, with a note.

Besides the variables, a paste says a little about the job, which ``check_env`` can use
(``ParsedEnv.job``): the collectives it runs when it is only a benchmark (``runs``), on how many
nodes it runs when a launcher or scheduler says so (``nodes``), which values open with a
``~`` that the shell expands (``tilde``: the process gets a home directory, not a ``~``), and the
networks NCCL's log lines show it using (``nets``: an external plugin reads its own variables).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from labkit.nccl.baked import Baked
from labkit.nccl.confidence import Doubt
from labkit.nccl.loose import LoosePair
from labkit.nccl.ncclconf import SHAPE as CONF_SHAPE
from labkit.nccl.ncclconf import SYSTEM_FILE, conf_files_unread

SHOWN = 20  # unparsed lines (and notes) a report lists; a pasted log can have hundreds


@dataclass(frozen=True)
class Assignment:
    """One variable set (or named, or unset) by one line: ``value`` is ``None`` when the line only
    names it (the value comes from elsewhere) or, with shape "unset", removes it; ``file`` is the
    config file a "nccl.conf" line was written to."""

    name: str
    value: str | None
    line: int
    shape: str  # "export", "mpirun -x", "docker -e", "yaml env", "nccl.conf", ...
    raw: str
    file: str = ""
    tilde: bool = False  # the shell replaces a "~" opening the value with a home directory


@dataclass(frozen=True)
class ParsedEnv:
    """What a pasted block sets: ``env`` (last assignment wins), every ``assignment`` in order,
    ``named`` (passed on, value not given here), ``unparsed`` lines that look like settings but
    could not be read, and ``notes`` on settings that do not do what they seem to."""

    env: dict[str, str]
    assignments: list[Assignment]
    named: list[str]
    unparsed: list[tuple[int, str]]
    notes: list[tuple[int, str]]
    runs: frozenset[str] | None = None
    """The collectives the paste's commands run when they are only nccl-tests style benchmarks
    (``all_reduce_perf``: {"AllReduce"}); None when a job of any other kind may run."""
    nodes: int | None = None
    """The most nodes a launch in the paste spans, where a scheduler directive or launcher
    option says (``#SBATCH --nodes 2``, ``srun -N2``, ``torchrun --nnodes=2``, ``mpirun -H
    a,b``): see ``node_count``; None when nothing says."""
    tilde: frozenset[str] = frozenset()
    """Variables whose value opens with a ``~`` that the shell expands (an unquoted assignment,
    ``export``, ``mpirun -x NAME=~/x`` in bash): the process sees a home directory there."""
    nets: tuple[tuple[str, str], ...] = ()
    """The networks NCCL's own log lines in the paste show in use (``Using network IBext_v8``) or
    loaded, each with the line that shows it (``labkit.nccl.nccllog.shown_nets``)."""
    loose: tuple[LoosePair, ...] = ()
    """Watched names paired with a value in a loose form (mid-sentence, a table cell, ``set X
    to Y``) for variables the structured parse did not read (``labkit.nccl.loose``): checked at
    most as warnings, never part of ``env`` (so not of ``--fix``'s block)."""
    baked: tuple[Baked, ...] = ()
    """Defaults Python source in the paste sets for the user (``if "X" not in os.environ``,
    ``setdefault``, a function's default argument: ``labkit.nccl.baked``)."""
    twice: tuple[tuple[str, tuple[str, ...], int], ...] = ()
    """Variables one command sets more than once with different values (``mpirun -x A=0 ...
    -x A=1``): the name, its values in order, and the command's line."""
    doubtful: tuple[Doubt, ...] = ()
    """Variables of ``env`` read in an unsure shape (a YAML line, prose, a table cell) whose
    value carries another language's syntax (``str = "INFO"``): findings on them are at most
    warnings (``labkit.nccl.confidence``)."""

    @property
    def job(self) -> dict[str, object]:
        """What the paste says about the job, as ``check_env`` keywords (``runs``, ``nodes``,
        ``tilde``, ``nets``), with its loose pairs, baked-in defaults, unsure values and
        variables one command sets twice (``loose``, ``baked``, ``doubtful``, ``twice``)."""
        return {"runs": self.runs, "nodes": self.nodes, "tilde": self.tilde, "nets": self.nets,
                "loose": self.loose, "baked": self.baked, "doubtful": self.doubtful,
                "twice": self.twice}

    @property
    def count(self) -> int:
        """How many variables the block sets or passes on."""
        return len(self.env) + len(self.named)

    def describe(self, source: str) -> list[str]:
        """Lines for a report: how many variables were read, which were only named, what could
        not be parsed."""
        shapes = Counter(a.shape for a in self.assignments if a.shape != "unset")
        plural = "" if self.count == 1 else "s"
        lines = [f"read {self.count} variable{plural} from {source}"
                 + (f" ({', '.join(f'{s} {n}' for s, n in shapes.items())})" if shapes else "")]
        if self.named:
            lines.append(f"named, value not given (not checked): {', '.join(self.named)}")
        lines += [f"line {n}: could not parse: {shorten(text)}"
                  for n, text in self.unparsed[:SHOWN]]
        lines += [f"line {n}: {note}" for n, note in self.notes[:SHOWN]]
        if self.loose:
            shown = ", ".join(f"{p.name}={p.value} (line {p.line})" for p in self.loose[:SHOWN])
            lines.append(f"read loosely, perhaps not settings (checked, at most a warning; not "
                         f"in --fix): {shown}" + (" ..." if len(self.loose) > SHOWN else ""))
        hidden = max(0, len(self.unparsed) - SHOWN) + max(0, len(self.notes) - SHOWN)
        return lines + ([f"... and {hidden} more lines like these"] if hidden else [])


def shorten(text: str, width: int = 120) -> str:
    """``text`` cut to ``width`` characters for a report line."""
    return text if len(text) <= width else text[:width - 3] + "..."


def merge(assignments: list[Assignment], unparsed: list[tuple[int, str]],
          notes: list[tuple[int, str]]) -> ParsedEnv:
    """The environment the assignments leave, with notes on variables set more than once."""
    env: dict[str, str] = {}
    named: dict[str, None] = {}
    values: dict[str, list[Assignment]] = {}
    conf: dict[str, list[Assignment]] = {}
    for a in assignments:
        if a.shape == CONF_SHAPE:
            conf.setdefault(a.name, []).append(a)
        elif a.shape == "unset":
            env.pop(a.name, None)
            named.pop(a.name, None)
        elif a.value is None:
            if a.name not in env:
                named[a.name] = None
        else:
            env[a.name] = a.value
            named.pop(a.name, None)
            values.setdefault(a.name, []).append(a)
    tilde = frozenset(name for name, sets in values.items() if name in env and sets[-1].tilde)
    notes = list(notes)
    for name, sets in values.items():
        if len({a.value for a in sets}) > 1:
            earlier = ", ".join(f"{a.value!r} on line {a.line}" for a in sets[-4:-1])
            earlier += f" and {len(sets) - 4} more" if len(sets) > 4 else ""
            notes.append((sets[-1].line, f"{name} is set more than once ({earlier}); the "
                          f"last one, {sets[-1].value!r}, is the one that counts"))
    unread = conf_files_unread({a.file for sets in conf.values() for a in sets},
                               env.get("NCCL_CONF_FILE", ""))
    for name, sets in conf.items():
        read = [a for a in sets if not unread.get(a.file, (False, ""))[0]]
        if read:
            notes += _conf_into(env, named, name, read)
    first = {a.file: a.line for sets in conf.values() for a in reversed(sets)}
    notes += [(first[file], note) for file, (_, note) in unread.items()]
    return ParsedEnv(env, assignments, list(named), unparsed, sorted(notes, key=lambda n: n[0]),
                     tilde=tilde, twice=_set_twice_in_one_command(values))


def _set_twice_in_one_command(values: dict[str, list[Assignment]]
                              ) -> tuple[tuple[str, tuple[str, ...], int], ...]:
    """The variables one command (one line and text) sets to different values."""
    twice = []
    for name, sets in values.items():
        commands: dict[tuple[int, str], list[str]] = {}
        for a in sets:
            commands.setdefault((a.line, a.raw), []).append(a.value or "")
        twice += [(name, tuple(vals), line) for (line, _), vals in commands.items()
                  if len(set(vals)) > 1]
    return tuple(twice)


def _conf_into(env: dict[str, str], named: dict[str, None], name: str,
               sets: list[Assignment]) -> list[tuple[int, str]]:
    """Apply one variable's config-file lines: NCCL reads the user's file, then /etc/nccl.conf,
    and setenv(..., 0) keeps the first value (and any the environment already has)."""
    ordered = sorted(sets, key=lambda a: a.file == SYSTEM_FILE)  # stable: first line first
    used = ordered[0]
    if name in env or name in named:
        shown = f"{env[name]!r}" if name in env else "its value"
        if name in env and env[name] == used.value:
            return []
        return [(used.line, f"{name} is set in the environment and in {used.file}: the "
                 f"environment's {shown} wins (NCCL reads its config files with setenv(name, "
                 "value, 0), which keeps a variable already set)")]
    env[name] = used.value or ""
    if len({a.value for a in sets}) > 1:
        others = ", ".join(f"{a.value!r} on line {a.line}" for a in ordered[1:4])
        return [(used.line, f"{name} is written to NCCL's config files more than once "
                 f"({others}): NCCL keeps the first value it reads, {used.value!r} from "
                 f"{used.file} (setenv without overwrite; the user's file before "
                 f"{SYSTEM_FILE})")]
    return []


_BENCHMARK = re.compile(r"(?<![\w-])[\w./-]*?(all_?reduce|all_?gather|reduce_?scatter|broadcast|"
                        r"reduce|all_?to_?all|sendrecv|scatter|gather|hypercube)"
                        r"(?:_perf|_bench|\.bin)(?:_mpi)?\b", re.IGNORECASE)
_OTHER_JOB = re.compile(r"(?<![\w-])(?:python3?|torchrun|deepspeed|accelerate|srun\s+python|"
                        r"[\w./-]+\.py|vllm|sglang|ray)(?![\w-])")
_COLLECTIVE = {"allreduce": "AllReduce", "allgather": "AllGather", "reducescatter": "ReduceScatter",
               "broadcast": "Broadcast", "reduce": "Reduce"}  # the rest run on p2p


def benchmarked_collectives(text: str) -> frozenset[str] | None:
    """What ``ParsedEnv.runs`` holds: the collectives of the benchmarks ``text`` runs
    (``all_reduce_perf``, ``allreduce.bin``), or None when it runs none or also anything else."""
    found = [m.group(1).lower().replace("_", "") for m in _BENCHMARK.finditer(text)]
    if not found or _OTHER_JOB.search(text):
        return None
    return frozenset(_COLLECTIVE[name] for name in found if name in _COLLECTIVE)


# How many nodes a launch spans, by who says it: Slurm (and Flux) -N/--nodes, torchrun --nnodes,
# deepspeed --num_nodes, accelerate --num_machines, mpirun's host list, PBS select=/nodes=, LSF
# -nnodes. A count is a number or a $VARIABLE the paste sets to one.
_COUNT = r"(\d+|\$\{?[A-Za-z_]\w*\}?)"
_SLURM_NODES = re.compile(rf"(?:^|\s)(?:-N\s*|--nodes(?:=|\s+)){_COUNT}(?:-{_COUNT})?(?![\w.])")
_LAUNCHER_NODES = {
    "torchrun": re.compile(rf"\s--nnodes(?:=|\s+){_COUNT}(?::{_COUNT})?(?![\w.])"),
    "deepspeed": re.compile(rf"\s--num[_-]nodes(?:=|\s+){_COUNT}(?![\w.])"),
    "accelerate": re.compile(rf"\s--num[_-]machines(?:=|\s+){_COUNT}(?![\w.])"),
}
_HOSTS = re.compile(r"\s(?:-H|--host|-host|-hosts)(?:=|\s+)([^\s$`'\"]+)")
_LAUNCHER = re.compile(r"(?<![\w.-])(?:[\w./-]*/)?(srun|salloc|sbatch|flux|mpirun|mpiexec|orterun|"
                       r"torchrun|torch\.distributed\.(?:run|launch)|deepspeed|accelerate|python3?|"
                       r"singularity|apptainer|docker|podman|bash|sh|jsrun)(?![\w-])")
_PBS_SELECT = re.compile(r"\bselect=([^\s,]+)")  # select=2:ncpus=64, select=1:host=a+1:host=b
_PBS_NODES = re.compile(r"\bnodes=(\d+)")  # Torque: nodes=2:ppn=8
_LSF_NODES = re.compile(rf"\s-nnodes\s+{_COUNT}(?![\w.])")


def node_count(text: str, env: dict[str, str]) -> int | None:
    """What ``ParsedEnv.nodes`` holds: the most nodes any launch in ``text`` asks for (``#SBATCH
    --nodes 2``, ``srun -N2``, ``torchrun --nnodes=1:4``, ``deepspeed --num_nodes 2``, ``mpirun
    -H a,b``, ``#PBS -l select=2``, ``#BSUB -nnodes 2``, ``#FLUX: -N 2``), a ``$VARIABLE`` read
    from ``env`` (the paste's own settings); None when nothing says. Commented-out lines
    (``##SBATCH``, ``# srun ...``) do not count."""
    counts: list[int] = []
    for line in text.replace("\\\n", " ").split("\n"):
        stripped = line.strip()
        if stripped.startswith(("#SBATCH", "#FLUX:")):
            counts += _counts(_SLURM_NODES, " " + stripped.split(None, 1)[-1], env)
        elif stripped.startswith("#PBS"):  # N chunks (N defaults to 1), normally one per node
            counts += [sum(int(c.split(":")[0]) if c.split(":")[0].isdigit() else 1
                           for c in spec.split("+")) for spec in _PBS_SELECT.findall(stripped)]
            counts += [int(n) for n in _PBS_NODES.findall(stripped)]
        elif stripped.startswith("#BSUB"):
            counts += _counts(_LSF_NODES, stripped, env)
        elif not stripped.startswith("#"):
            counts += _launcher_counts(stripped, env)
    return max(counts) if counts else None


def _launcher_counts(line: str, env: dict[str, str]) -> list[int]:
    """Node counts of the launchers on one command line, each read from its own options only
    (``srun -N 2 mpirun -N 4``: mpirun's -N is processes per node)."""
    found = list(_LAUNCHER.finditer(line))
    counts = []
    for n, match in enumerate(found):
        segment = line[match.end():found[n + 1].start() if n + 1 < len(found) else len(line)]
        name = match.group(1)
        if name in ("srun", "salloc", "sbatch", "flux"):
            counts += _counts(_SLURM_NODES, segment, env)
        elif name in ("torchrun", "torch.distributed.run", "torch.distributed.launch"):
            counts += _counts(_LAUNCHER_NODES["torchrun"], segment, env)
        elif name in _LAUNCHER_NODES:
            counts += _counts(_LAUNCHER_NODES[name], segment, env)
        elif name in ("mpirun", "mpiexec", "orterun"):
            counts += [len({h.split(":")[0] for h in m.group(1).split(",") if h})
                       for m in _HOSTS.finditer(segment)]
    return counts


def _counts(pattern: re.Pattern[str], text: str, env: dict[str, str]) -> list[int]:
    """The largest count of each match (``2-4`` and ``1:4`` are ranges), where it is known."""
    counts = []
    for match in pattern.finditer(text):
        known = [n for n in (_number(g, env) for g in match.groups() if g) if n is not None]
        if known:
            counts.append(max(known))
    return counts


def _number(text: str, env: dict[str, str]) -> int | None:
    if text.startswith("$"):
        text = env.get(text.strip("${}"), "")
    return int(text) if text.isdigit() else None
