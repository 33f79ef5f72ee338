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


def wrap(cls: type, recorder: Recorder) -> None:
    original = cls.forward  # type: ignore[attr-defined]
    if getattr(original, "_perfbisect_timed", False):
        return

    def forward(self: Any, forward_batch: Any, *args: Any, **kwargs: Any) -> Any:
        mode = getattr(forward_batch, "forward_mode", None)
        is_verify = getattr(mode, "is_target_verify", None)
        if getattr(self, "is_draft_worker", False) or not (callable(is_verify) and is_verify()):
            return original(self, forward_batch, *args, **kwargs)
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
