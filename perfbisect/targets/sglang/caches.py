"""Compile and kernel caches per pin set: what an SGLang launch compiles once (Triton kernels,
TorchInductor graphs, JIT kernels) is kept in perfbisect's cache, keyed by the pin set, so the
later launches of the set load it instead of compiling again, and another pin set (other torch,
Triton or kernel packages) never sees it.

The variables, as the released packages read them (SGLang 0.5.12, flashinfer 0.6.11, tvm-ffi
0.1, torch 2.11, Triton 3.x, the CUDA driver): ``TRITON_CACHE_DIR`` (default
``~/.triton/cache``), ``TORCHINDUCTOR_CACHE_DIR`` (``/tmp/torchinductor_<user>``),
``FLASHINFER_WORKSPACE_BASE`` (flashinfer's JIT kernels under ``<it>/.cache/flashinfer``),
``TVM_FFI_CACHE_DIR`` (SGLang's ``jit_kernel`` builds through tvm-ffi, ``~/.cache/tvm-ffi``),
``SGLANG_DG_CACHE_DIR`` and ``DG_JIT_CACHE_DIR`` (deep_gemm's JIT kernels; SGLang forwards the
first to the second), ``SGLANG_CACHE_DIR`` (SGLang's torch.compile and FA3 caches,
``~/.cache/sglang``) and ``CUDA_CACHE_PATH`` (the driver's PTX JIT cache, ``~/.nv/ComputeCache``).
A variable the user set (in the experiment's ``[env]`` or the served process's environment)
is never overridden: the serve command sets each one only where it is unset.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from perfbisect.hosts.base import Host
from perfbisect.targets.sglang.envs import OK_MARKER, evict_envs

KIND = "sglang-compile"  # perfbisect's cache kind (cachedir.KINDS)
CACHE_VARS: tuple[tuple[str, str], ...] = (
    ("TRITON_CACHE_DIR", "triton"),
    ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
    ("FLASHINFER_WORKSPACE_BASE", "flashinfer"),
    ("TVM_FFI_CACHE_DIR", "tvm-ffi"),
    ("SGLANG_DG_CACHE_DIR", "deep_gemm"),
    ("DG_JIT_CACHE_DIR", "deep_gemm"),
    ("SGLANG_CACHE_DIR", "sglang"),
    ("CUDA_CACHE_PATH", "cuda"),
)
# A cache this size is already known to be warm: counting stops there.
COUNT_LIMIT = 100000


@dataclass(frozen=True)
class CompileCache:
    """One launch's compile caches: the folder, the variables it sets (those the user did not
    set), and how many files it held when the launch started (0: this pin set's first)."""

    key: str
    path: str
    variables: tuple[tuple[str, str], ...]  # (name, folder) set where the environment lacks it
    user_set: tuple[str, ...]  # the experiment's [env] sets these itself
    files: int

    @property
    def warm(self) -> bool:
        return self.files > 0

    def shell_prefix(self) -> str:
        """``NAME="${NAME:-folder}" ...`` for the serve command: a value the served process
        already inherits wins."""
        return "".join(
            f'{name}="${{{name}:-{shlex.quote(folder)}}}" ' for name, folder in self.variables
        )

    def note(self) -> str:
        state = f"warm: {self.files} files" if self.warm else "cold: the pin set's first launch"
        where = f"compile caches {self.path} ({state})"
        if self.user_set:
            where += f"; left to the experiment's [env]: {', '.join(self.user_set)}"
        return where


def installed_key(python: str, version: str) -> str:
    """The key of a ``build = "installed"`` interpreter's caches (it has no pin set)."""
    return "installed-" + hashlib.sha256(f"{python}\0{version}".encode()).hexdigest()[:16]


def prepare(
    host: Host, key: str, user_env: Mapping[str, str], keep: int, timeout_s: float = 120
) -> CompileCache:
    """The pin set's cache folder on the host, made if new and marked as used now (for the
    LRU), with its file count; the least recently used beyond ``keep`` are removed."""
    root = f"{host.cache_dir()}/{KIND}"
    path = f"{root}/{key}"
    q = shlex.quote
    count = (
        f"mkdir -p {q(path)} && touch {q(path)}/{OK_MARKER} && "
        f"find {q(path)} -type f ! -name {OK_MARKER} 2>/dev/null | head -n {COUNT_LIMIT} | wc -l"
    )
    result = host.run(["sh", "-c", count], timeout_s=timeout_s)
    lines = result.output.strip().splitlines() if result.ok else []
    files = int(lines[-1]) if lines and lines[-1].strip().isdigit() else 0
    evict_envs(host, root, keep, spare=path)
    return layout(host, key, user_env, files)


def layout(host: Host, key: str, user_env: Mapping[str, str], files: int = 0) -> CompileCache:
    """Where ``key``'s caches are on the host and which variables point there (nothing is
    made: ``bisect start --dry-run`` shows it)."""
    path = f"{host.cache_dir()}/{KIND}/{key}"
    variables = tuple(
        (name, f"{path}/{folder}") for name, folder in CACHE_VARS if name not in user_env
    )
    user_set = tuple(name for name, _ in CACHE_VARS if name in user_env)
    return CompileCache(key, path, variables, user_set, files)
