"""The server args that shorten an SGLang launch's start-up, for the version being served:
CUDA graphs captured only for the batch sizes the workload reaches, and SGLang's own warm-up
request skipped where perfbisect's workload warms the server up itself. Each is a default the
experiment can turn off (``fit_cuda_graphs``, ``skip_server_warmup``), and the experiment's own
graph flags always win."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from perfbisect.hosts.base import Host
from perfbisect.targets.sglang.caches import CompileCache
from perfbisect.targets.sglang.kind import SglangOptions
from perfbisect.targets.sglang.launch_args import (
    DECLARATION_MARKS,
    GRAPH_FLAGS,
    WARMUP_FLAG,
    declared_flags,
    graph_flag,
    graph_sizes,
    user_flag,
)


@dataclass(frozen=True)
class Startup:
    declared: set[str]  # the start-up flags the served version declares
    cache: CompileCache | None  # the pin set's compile caches (None: compile_cache = false)


def declared_on_host(host: Host, package: str) -> set[str]:
    """The start-up flags the SGLang package folder ``package`` on the host declares (read from
    its own source: a checkout without a version number says it as well as a release)."""
    q = shlex.quote
    patterns = " ".join(f"-e {q(m)}" for m in DECLARATION_MARKS)
    found = host.run(
        [
            "sh",
            "-c",
            f"grep -rhoF {patterns} {q(package)}/srt/server_args.py {q(package)}/srt/arg_groups "
            "2>/dev/null; true",
        ],
        timeout_s=120,
    )
    return declared_flags(found.output if found.ok else "")


def startup_args(
    opts: SglangOptions, args: Sequence[Any], startup: Startup
) -> tuple[list[str], str]:
    """The args to add to one launch's server args (``args``: the experiment's own for it), and
    the launch's note saying what was done and what was left to the experiment."""
    extra: list[str] = []
    said: list[str] = []
    given = [str(a) for a in args]
    if opts.fit_cuda_graphs:
        own = user_flag(given, GRAPH_FLAGS)
        flag = graph_flag(startup.declared)
        if own:
            said.append(f"CUDA-graph sizes left to the experiment's own {own}")
        elif flag:
            sizes = graph_sizes(opts.concurrency)
            extra += [flag, *(str(bs) for bs in sizes)]
            run = sizes == list(range(1, sizes[-1] + 1))
            shown = f"1-{sizes[-1]}" if run else ", ".join(map(str, sizes))
            said.append(
                f"CUDA graphs for batch sizes {shown} only ({flag}: the workload's "
                f"concurrency {opts.concurrency})"
            )
        else:
            said.append("CUDA-graph sizes: SGLang's own (this version has no --cuda-graph-bs)")
    if (
        opts.skip_server_warmup
        and opts.warmup_requests > 0
        and WARMUP_FLAG not in given
        and WARMUP_FLAG in startup.declared
    ):
        extra.append(WARMUP_FLAG)
        said.append(
            f"SGLang's own warm-up skipped ({WARMUP_FLAG}): the workload sends "
            f"{opts.warmup_requests} warm-up requests itself"
        )
    if startup.cache is not None:
        said.append(startup.cache.note())
    return extra, ("start-up: " + "; ".join(said)) if said else ""
