"""NCCL's own account of each communicator, from ``NCCL_DEBUG=INFO`` output.

Lines look like ``<host>:<pid>:<tid> [<cudaDev>] NCCL INFO <message>`` (the format of NCCL 2.18
to 2.28 as printed in public NVIDIA/nccl issues, e.g. #1038, #1814, #1936). What is read:
``NCCL version X`` (also printed bare by rank 0), ``<NAME> set by environment to <value>``
(what NCCL took from the environment), ``comm 0x.. rank R nranks N cudaDev D ... - Init
COMPLETE`` (one communicator, created on thread ``tid`` of ``pid``; ``ncclCommInitRankConfig``
may precede ``comm``), and with ``NCCL_DEBUG_SUBSYS=TUNING`` ``<Op>: <n> Bytes -> Algo <A>
proto <P>``. With ``NCCL_DEBUG_FILE=<dir>/nccl.%h.%p`` each process writes its own file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

_PREFIX = re.compile(
    r"^(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL INFO (?P<msg>.*)$"
)
_VERSION = re.compile(r"NCCL version (?P<version>\S+)")
_ENV = re.compile(r"^(?P<name>NCCL_[A-Z0-9_]+) set (?:by environment )?to (?P<value>.*)$")
_COMM = re.compile(
    r"comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<dev>\d+)"
    r".*?(?:commId (?P<commid>0x[0-9a-f]+))?.*- Init (?P<state>START|COMPLETE)"
)
_TUNING = re.compile(
    r"^(?P<op>[A-Za-z]+): (?P<bytes>\d+) Bytes -> Algo (?P<algo>\S+) proto (?P<proto>\S+)"
)


@dataclass(frozen=True)
class Communicator:
    pid: int
    tid: int  # the thread that created it
    comm: str
    rank: int
    nranks: int
    cuda_dev: int
    comm_id: str | None
    # what NCCL said it took from the environment on that thread while making this one (between
    # its "Init START" and "Init COMPLETE"): per communicator, since NCCL reads NCCL_PROTO /
    # NCCL_ALGO at each communicator's tuning, so two communicators of one process can differ
    taken: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ProcessNccl:
    """What one process's NCCL said."""

    host: str
    pid: int
    version: str | None
    taken: Mapping[str, str]  # NCCL_* NCCL took from the environment (or a config file)
    communicators: tuple[Communicator, ...]
    tuning: tuple[tuple[str, str, str], ...] = field(default_factory=tuple)  # (op, algo, proto)


class _Process:
    def __init__(self, host: str) -> None:
        self.host = host
        self.version: str | None = None
        self.taken: dict[str, str] = {}
        self.comms: dict[str, Communicator] = {}
        self.tuning: list[tuple[str, str, str]] = []
        self.making: dict[int, str] = {}  # thread -> the communicator it is making
        self.comm_taken: dict[str, dict[str, str]] = {}


def parse(lines: Iterable[str]) -> list[ProcessNccl]:
    """One entry per process that printed NCCL INFO lines, in order of first appearance."""
    state: dict[int, _Process] = {}
    bare_version: str | None = None
    for raw in lines:
        line = raw.rstrip("\n")
        match = _PREFIX.match(line)
        if match is None:
            version = _VERSION.search(line) if line.startswith("NCCL version") else None
            bare_version = version.group("version") if version else bare_version
            continue
        pid, tid, msg = int(match.group("pid")), int(match.group("tid")), match.group("msg")
        entry = state.setdefault(pid, _Process(match.group("host")))
        if (version := _VERSION.search(msg)) is not None:
            entry.version = version.group("version")
        elif (env := _ENV.match(msg)) is not None:
            # NCCL's parameters end the line with a period ("... set by environment to 0.")
            value = env.group("value").strip().removesuffix(".")
            entry.taken[env.group("name")] = value
            if tid in entry.making:
                entry.comm_taken.setdefault(entry.making[tid], {})[env.group("name")] = value
        elif (comm := _COMM.search(msg)) is not None:
            if comm.group("state") == "START":
                entry.making[tid] = comm.group("comm")
            elif entry.making.get(tid) == comm.group("comm"):
                del entry.making[tid]
            previous = entry.comms.get(comm.group("comm"))
            entry.comms[comm.group("comm")] = Communicator(
                pid,
                previous.tid if previous else tid,  # the thread of Init START created it
                comm.group("comm"),
                int(comm.group("rank")),
                int(comm.group("nranks")),
                int(comm.group("dev")),
                comm.group("commid"),
            )
        elif (tuning := _TUNING.match(msg)) is not None:
            entry.tuning.append((tuning.group("op"), tuning.group("algo"), tuning.group("proto")))
    return [
        ProcessNccl(
            e.host,
            pid,
            e.version or bare_version,
            dict(e.taken),
            tuple(replace(c, taken=e.comm_taken.get(c.comm, {})) for c in e.comms.values()),
            tuple(dict.fromkeys(e.tuning)),
        )
        for pid, e in state.items()
    ]


# Set by perfbisect itself for the diagnostic launch: never a finding. NCCL_VERSION is NVIDIA's
# container images' label of the NCCL package they hold (2.28.3-1 on the H200 machine, whose
# torch loads 2.28.9), not a setting NCCL reads.
DIAGNOSTIC_VARIABLES = frozenset({"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"})
NOT_SETTINGS = DIAGNOSTIC_VARIABLES | {"NCCL_VERSION"}
# Read when NCCL tunes a collective's algorithm and protocol, which it never does for a
# communicator of one rank: its log says nothing of them there, taken or not (seen with NCCL
# 2.28.9 on one H200: NCCL_PROTO=LL and NCCL_ALGO=Ring in the environment, no line about either).
TUNING_ONLY = frozenset({"NCCL_PROTO", "NCCL_ALGO"})


def _settings(environment: Mapping[str, str]) -> list[str]:
    return [n for n in environment if n.startswith("NCCL_") and n not in NOT_SETTINGS]


def one_rank(process: ProcessNccl) -> bool:
    return bool(process.communicators) and all(c.nranks == 1 for c in process.communicators)


def not_taken(process: ProcessNccl, environment: Mapping[str, str]) -> list[str]:
    """NCCL_* variables in the process's environment that its NCCL did not say it took: the
    failure where a tuning variable is set but the communicator that ran was made without it
    (less those its log could not mention: see ``untold``)."""
    untold = set(untold_at_one_rank(process, environment))
    return sorted(n for n in _settings(environment) if n not in process.taken and n not in untold)


def untold_at_one_rank(process: ProcessNccl, environment: Mapping[str, str]) -> list[str]:
    """Tuning variables in the environment of a process whose communicators all have one rank:
    NCCL does not tune those, so its log cannot say whether they would have been taken."""
    if not one_rank(process):
        return []
    return sorted(n for n in _settings(environment) if n in TUNING_ONLY and n not in process.taken)


# Read again at every communicator's tuning (ncclGetEnv in NCCL's tuning code, printed each
# time); most other NCCL_* are parameters NCCL loads once per process and prints once, so their
# absence from a later communicator's lines says nothing.
PER_COMMUNICATOR = frozenset({"NCCL_PROTO", "NCCL_ALGO"})


def uneven(process: ProcessNccl) -> list[tuple[str, str, list[str]]]:
    """Per-communicator tuning variables one communicator of the process took and another did
    not: (name, value, the communicators made without it), e.g. the one made before the
    variable was put into the process's environment."""
    out = []
    comms = process.communicators
    for name in sorted({n for c in comms for n in c.taken if n in PER_COMMUNICATOR}):
        values = sorted({c.taken[name] for c in comms if name in c.taken})
        without = [c.comm for c in comms if name not in c.taken]
        if without:
            out.append((name, ", ".join(values), without))
    return out
