"""perfbisect's SGLang verify timer, installed as ``perfbisect_verify_timer.py`` plus a ``.pth``
line (``import perfbisect_verify_timer``) in the server's site-packages.

It does nothing unless ``PERFBISECT_VERIFY_TIMER_DIR`` names a directory. Then it installs a
meta-path hook that wraps ``sglang.srt.model_executor.model_runner.ModelRunner.forward`` right
after that module loads, without editing SGLang. The wrapper times target-verify calls only
(``forward_batch.forward_mode.is_target_verify()``, never the draft worker, never while a CUDA
graph is being captured) with CUDA events, resolves them lazily with ``event.query()`` (never a
synchronize), and appends JSON lines ``{"t", "ms", "bs", "graph", "rank"}`` line-buffered to
``verify.rank<R>.<pid>.jsonl`` (ranks are SIGKILLed: no atexit). ``graph`` is whether that
verify replayed a CUDA graph, read from the return value: ``(out, can_run_graph)`` in
0.4.6-0.5.5, ``.can_run_graph`` from 0.5.9, unknown (null) for a bare output before 0.4.6.

Diagnostic launches (``perfbisect bisect explain``) also set ``PERFBISECT_PROFILE_DIR``: then
``VerifyProfiler`` runs PyTorch's profiler over K speculative cycles (from the start of verify
number skip+1 to the start of verify number skip+K+1, so whole cycles: draft, verify,
draft-extend), marks those stages with ``record_function`` ranges (``perfbisect.verify``,
``perfbisect.draft``, ``perfbisect.draft_extend``), and writes a Chrome trace
``trace.rank<R>.<pid>.json`` plus ``process.rank<R>.<pid>.json`` (the environment that reached
this rank, secrets' values withheld; CPU affinity; NUMA node). The reference server loads this
file for the same purpose (``PERFBISECT_PROFILE_BOOT``), so both targets are profiled alike.

Standard library only at import time: torch is imported inside the wrapper, when SGLang has
loaded it already. Never edit this to import torch at the top (it runs in every interpreter).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import time
from typing import Any

ENV = "PERFBISECT_VERIFY_TIMER_DIR"
TARGET = "sglang.srt.model_executor.model_runner"
PROFILE_ENV = "PERFBISECT_PROFILE_DIR"
PROFILE_CYCLES_ENV = "PERFBISECT_PROFILE_CYCLES"
PROFILE_SKIP_ENV = "PERFBISECT_PROFILE_SKIP"
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")


class _NoMark:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def nccl_libraries() -> list[str]:
    """The NCCL libraries this process has mapped (its own /proc/self/maps): the one its
    communicators run on, whatever NCCL's log says of its version."""
    try:
        with open("/proc/self/maps") as fh:
            paths = {line.split()[-1] for line in fh if "libnccl" in line and "/" in line}
    except OSError:
        return []
    return sorted(p for p in paths if p.startswith("/"))


def numa_node(cpus: set[int]) -> int | None:
    """The NUMA node holding all of ``cpus`` (None when they span several or none is known)."""
    root = "/sys/devices/system/node"
    try:
        names = [n for n in os.listdir(root) if n.startswith("node") and n[4:].isdigit()]
    except OSError:
        return None
    for name in names:
        try:
            with open(os.path.join(root, name, "cpulist")) as fh:
                text = fh.read().strip()
        except OSError:
            continue
        members: set[int] = set()
        for part in filter(None, text.split(",")):
            lo, _, hi = part.partition("-")
            members.update(range(int(lo), int(hi or lo) + 1))
        if cpus and cpus <= members:
            return int(name[4:])
    return None


class VerifyProfiler:
    """torch.profiler over K whole cycles of one rank, driven by the verify calls it is told of.

    Exports from the stop call itself: ranks die by SIGKILL, so nothing waits for exit."""

    def __init__(self, folder: str, rank: int, cycles: int, skip: int) -> None:
        self.folder, self.rank, self.cycles, self.skip = folder, rank, cycles, skip
        self.seen = 0
        self.prof: Any = None
        self.done = False
        self.error: str | None = None

    @classmethod
    def from_env(cls, rank: int) -> VerifyProfiler | None:
        folder = os.environ.get(PROFILE_ENV)
        if not folder:
            return None
        cycles = int(os.environ.get(PROFILE_CYCLES_ENV) or 10)
        skip = int(os.environ.get(PROFILE_SKIP_ENV) or 5)
        profiler = cls(folder, rank, cycles, skip)
        profiler.write_process()
        return profiler

    def _path(self, kind: str, ext: str) -> str:
        os.makedirs(self.folder, exist_ok=True)
        return os.path.join(self.folder, f"{kind}.rank{self.rank}.{os.getpid()}.{ext}")

    def write_process(self) -> None:
        env = {
            k: ("<withheld>" if any(w in k.upper() for w in SECRET_WORDS) else v)
            for k, v in os.environ.items()
        }
        try:
            cpus = set(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = set()
        record = {
            "rank": self.rank,
            "pid": os.getpid(),
            "env": env,
            "affinity": sorted(cpus),
            "numa": numa_node(cpus),
            "nccl_library": nccl_libraries(),
        }
        with open(self._path("process", "json"), "w") as fh:
            json.dump(record, fh)

    def mark(self, name: str) -> Any:
        """A named range in the trace while profiling; nothing otherwise."""
        if self.prof is None:
            return _NoMark()
        import torch

        return torch.profiler.record_function(name)

    def before_verify(self) -> None:
        """Called at the start of every verify: starts or stops the profiler at cycle bounds."""
        self.seen += 1
        if self.done:
            return
        try:
            if self.prof is None and self.seen > self.skip:
                import torch
                from torch.profiler import ProfilerActivity, profile

                activities = [ProfilerActivity.CPU]
                if torch.cuda.is_available():
                    activities.append(ProfilerActivity.CUDA)
                # the environment the profiled verifies run with (a variable put into
                # os.environ after start-up shows here; the record from start-up is replaced)
                self.write_process()
                self.prof = profile(activities=activities, record_shapes=False)
                self.prof.start()
            elif self.prof is not None and self.seen > self.skip + self.cycles:
                prof, self.prof = self.prof, None
                self.done = True
                prof.stop()
                prof.export_chrome_trace(self._path("trace", "json"))
        except Exception as exc:  # a failed profile must not fail the launch; say so instead
            self.done, self.prof = True, None
            self.error = f"{type(exc).__name__}: {exc}"
            with open(self._path("profile-error", "txt"), "w") as fh:
                fh.write(self.error + "\n")


def graph_flag(ret: Any) -> bool | None:
    """Whether the forward replayed a CUDA graph, from the version's return shape."""
    if isinstance(ret, tuple) and len(ret) == 2 and isinstance(ret[1], bool):
        return ret[1]
    flag = getattr(ret, "can_run_graph", None)
    return flag if isinstance(flag, bool) else None


class Recorder:
    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.files: dict[int, Any] = {}
        self.pending: list[tuple[Any, Any, dict[str, Any]]] = []

    def write(self, record: dict[str, Any]) -> None:
        rank = int(record["rank"])
        fh = self.files.get(rank)
        if fh is None:
            os.makedirs(self.folder, exist_ok=True)
            path = os.path.join(self.folder, f"verify.rank{rank}.{os.getpid()}.jsonl")
            fh = self.files[rank] = open(path, "a", buffering=1)  # noqa: SIM115 - process-long
        fh.write(json.dumps(record) + "\n")

    def resolve(self) -> None:
        """Write every timed verify whose end event has completed; keep the others."""
        still = []
        for start, end, record in self.pending:
            if end.query():
                record["ms"] = start.elapsed_time(end)
                self.write(record)
            else:
                still.append((start, end, record))
        self.pending = still


def _draft_stage(mode: Any) -> str:
    is_extend = getattr(mode, "is_draft_extend", None)
    return "perfbisect.draft_extend" if callable(is_extend) and is_extend() else "perfbisect.draft"


def wrap(cls: type, recorder: Recorder) -> None:
    original = cls.forward  # type: ignore[attr-defined]
    if getattr(original, "_perfbisect_timed", False):
        return
    profilers: dict[int, VerifyProfiler | None] = {}

    def profiler_of(runner: Any) -> VerifyProfiler | None:
        rank = int(getattr(runner, "tp_rank", 0) or 0)
        if rank not in profilers:
            profilers[rank] = VerifyProfiler.from_env(rank)
        return profilers[rank]

    def forward(self: Any, forward_batch: Any, *args: Any, **kwargs: Any) -> Any:
        mode = getattr(forward_batch, "forward_mode", None)
        is_verify = getattr(mode, "is_target_verify", None)
        if getattr(self, "is_draft_worker", False) or not (callable(is_verify) and is_verify()):
            profiler = profiler_of(self) if os.environ.get(PROFILE_ENV) else None
            if profiler is None or not getattr(self, "is_draft_worker", False):
                return original(self, forward_batch, *args, **kwargs)
            with profiler.mark(_draft_stage(mode)):
                return original(self, forward_batch, *args, **kwargs)
        import torch

        profiler = profiler_of(self) if os.environ.get(PROFILE_ENV) else None
        if profiler is not None:
            if not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
                profiler.before_verify()
            with profiler.mark("perfbisect.verify"):
                return _timed(self, forward_batch, args, kwargs)
        return _timed(self, forward_batch, args, kwargs)

    def _timed(self: Any, forward_batch: Any, args: Any, kwargs: Any) -> Any:
        import torch

        cuda = torch.cuda.is_available()
        if cuda and torch.cuda.is_current_stream_capturing():
            return original(self, forward_batch, *args, **kwargs)
        record: dict[str, Any] = {
            "t": time.time(),
            "bs": getattr(forward_batch, "batch_size", None),
            "rank": int(getattr(self, "tp_rank", 0) or 0),
        }
        if cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            ret = original(self, forward_batch, *args, **kwargs)
            end.record()
            record["graph"] = graph_flag(ret)
            recorder.pending.append((start, end, record))
            recorder.resolve()
            return ret
        begin = time.perf_counter_ns()
        ret = original(self, forward_batch, *args, **kwargs)
        record["ms"] = (time.perf_counter_ns() - begin) / 1e6
        record["graph"] = graph_flag(ret)
        recorder.write(record)
        return ret

    forward._perfbisect_timed = True  # type: ignore[attr-defined]
    forward.__wrapped__ = original  # type: ignore[attr-defined]
    cls.forward = forward  # type: ignore[attr-defined]


class _WrappingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, recorder: Recorder) -> None:
        self.loader = loader
        self.recorder = recorder

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        cls = getattr(module, "ModelRunner", None)
        if isinstance(cls, type):
            wrap(cls, self.recorder)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _WrappingLoader(spec.loader, self.recorder)
        return spec


def install() -> bool:
    folder = os.environ.get(ENV)
    if not folder:
        return False
    recorder = Recorder(folder)
    loaded = sys.modules.get(TARGET)
    if loaded is not None and isinstance(getattr(loaded, "ModelRunner", None), type):
        wrap(loaded.ModelRunner, recorder)
    else:
        sys.meta_path.insert(0, _Finder(recorder))
    return True


install()
