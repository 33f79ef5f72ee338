"""Reference speculative-decoding server: an HTTP front and one worker process per TP rank.

Built like SGLang's: the front spawns the ranks with multiprocessing ``spawn``; each rank holds
its shard of a decoder (column-parallel QKV and up-projection, row-parallel output and
down-projection, all-reduce after each), a cheap draft proposer drafts tokens, and the target
*verify* forward scores them; the longest agreeing prefix is accepted. On CUDA the draft decode
and the verify forward are captured in CUDA graphs; ``--verify-mode eager`` takes verify out of
them, which is the regression this project exists for. Random weights from a fixed seed.

Per-cycle verify timing: every rank appends JSON lines ``{"t", "ms", "bs", "graph"}`` to
``verify.rank<R>.<pid>.jsonl`` in ``--timing-dir`` (or $PERFBISECT_VERIFY_TIMER_DIR), the format
of perfbisect's SGLang verify timer. CUDA events on GPU (resolved after the cycle, never a
synchronize inside the timed region), ``perf_counter_ns`` on CPU.

Diagnostic launches (``perfbisect bisect explain``): with ``PERFBISECT_PROFILE_DIR`` and
``PERFBISECT_PROFILE_BOOT`` (the path of perfbisect's verify timer boot module) set, each rank
profiles K cycles with the boot module's ``VerifyProfiler``, exactly as an SGLang server is
profiled, and marks its draft and verify stages in the trace.

Self-contained (standard library + torch), so it can be copied to a host and run there:
    python server.py serve --tp 2 --port 8000 [--device cuda]
    python server.py bench --port 8000 --cycles 40 --warmup 5 --timing-dir DIR
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import signal
import socket
import sys
import threading
import time
import traceback
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

READY_TIMEOUT_S = 600.0
REQUEST_TIMEOUT_S = 600.0


def die_with_parent() -> None:
    """A rank must not outlive the front, even when the front is SIGKILLed (Linux)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def load_profiler(rank: int):  # type: ignore[no-untyped-def]
    """The boot module's profiler on a diagnostic launch; None on every other launch."""
    boot = os.environ.get("PERFBISECT_PROFILE_BOOT")
    if not boot or not os.environ.get("PERFBISECT_PROFILE_DIR"):
        return None
    import importlib.util

    spec = importlib.util.spec_from_file_location("perfbisect_verify_timer", boot)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.VerifyProfiler.from_env(rank)


class NoMark:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# ---- the model (runs in the ranks) ---------------------------------------------------------


class Model:
    """A decoder of ``layers`` blocks, sharded over ``tp`` ranks, with a KV cache."""

    def __init__(self, args: argparse.Namespace, rank: int, tp: int, device: str) -> None:
        import torch

        self.torch = torch
        self.args, self.rank, self.tp, self.device = args, rank, tp, device
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        self.dtype = dtype
        h, nh = args.hidden, args.heads
        if nh % tp or (4 * h) % tp:
            raise SystemExit(f"--heads {nh} and the MLP width must divide by --tp {tp}")
        self.hd = h // nh
        self.nh_local = nh // tp
        ffn_local = 4 * h // tp
        gen = torch.Generator(device=device).manual_seed(args.seed)

        def weight(*shape: int, fan_in: int):  # type: ignore[no-untyped-def]
            # Every rank draws the full matrix from the same seed (on its own device, which is
            # fast on a GPU), then keeps its shard.
            return torch.randn(*shape, generator=gen, device=device) / math.sqrt(fan_in)

        self.embed = weight(args.vocab, h, fan_in=1).to(device, dtype)
        # The proposer sees a perturbed copy of the embedding: cheap, and only mostly right.
        noise = weight(args.vocab, h, fan_in=1) * args.draft_noise
        self.draft_embed = (self.embed.float() + noise).to(dtype)
        self.lm_head = weight(h, args.vocab, fan_in=h).to(device, dtype)
        self.layers = []
        for _ in range(args.layers):
            wq, wk, wv = (weight(h, h, fan_in=h) for _ in range(3))
            cols = [w.chunk(tp, dim=1)[rank] for w in (wq, wk, wv)]
            wo = weight(h, h, fan_in=h).chunk(tp, dim=0)[rank]
            up = weight(h, 4 * h, fan_in=h).chunk(tp, dim=1)[rank]
            down = weight(4 * h, h, fan_in=4 * h).chunk(tp, dim=0)[rank]
            self.layers.append(
                {
                    "wqkv": torch.cat(cols, dim=1).contiguous().to(device, dtype),
                    "wo": wo.contiguous().to(device, dtype),
                    "up": up.contiguous().to(device, dtype),
                    "down": down.contiguous().to(device, dtype),
                    "k": torch.zeros(
                        args.max_seq, self.nh_local, self.hd, device=device, dtype=dtype
                    ),
                    "v": torch.zeros(
                        args.max_seq, self.nh_local, self.hd, device=device, dtype=dtype
                    ),
                }
            )
        assert ffn_local == self.layers[0]["up"].shape[1]
        pos = torch.arange(args.max_seq).unsqueeze(1)
        freq = torch.exp(torch.arange(0, h, 2) * (-math.log(10000.0) / h))
        table = torch.zeros(args.max_seq, h)  # sinusoidal positions
        table[:, 0::2] = torch.sin(pos * freq)
        table[:, 1::2] = torch.cos(pos * freq)
        self.pos_table = (0.1 * table).to(device, dtype)
        # Small residual branches (as in a trained model's early layers): the next token
        # depends mostly on the current one, so a cheap proposer can often guess it.
        self.branch_scale = args.branch_scale
        self.key_index = torch.arange(args.max_seq, device=device)

    def all_reduce(self, x):  # type: ignore[no-untyped-def]
        if self.tp > 1 or self.args.group == "always":
            self.torch.distributed.all_reduce(x)
        return x

    @staticmethod
    def norm(x):  # type: ignore[no-untyped-def]
        return x * (x.float().pow(2).mean(-1, keepdim=True) + 1e-6).rsqrt().to(x.dtype)

    def forward(self, tokens, positions, use_cache: bool = True, static: bool = False):  # type: ignore[no-untyped-def]
        """Greedy next token for every input position. ``use_cache``: attend over the KV cache
        (written at ``positions``); otherwise the input must be the whole sequence from 0."""
        torch = self.torch
        x = self.embed[tokens] + self.pos_table[positions]
        n = tokens.shape[0]
        for layer in self.layers:
            qkv = self.norm(x) @ layer["wqkv"]
            q, k, v = qkv.view(n, 3, self.nh_local, self.hd).unbind(1)
            if use_cache:
                layer["k"].index_copy_(0, positions, k)
                layer["v"].index_copy_(0, positions, v)
                # Graphs need static shapes: attend over the whole cache buffer with a mask.
                # Eagerly, only over the filled part (what a real kernel's length bound does).
                span = self.args.max_seq if static else int(positions[-1]) + 1
                keys, values = layer["k"][:span], layer["v"][:span]
                mask = self.key_index[:span].unsqueeze(0) <= positions.unsqueeze(1)
            else:
                keys, values = k, v
                mask = positions.unsqueeze(0) <= positions.unsqueeze(1)
            scores = torch.einsum("qhd,khd->hqk", q, keys) / math.sqrt(self.hd)
            scores = scores.masked_fill(~mask.unsqueeze(0), float("-inf"))
            attn = torch.einsum("hqk,khd->qhd", scores.softmax(-1), values).reshape(n, -1)
            x = x + self.branch_scale * self.all_reduce(attn @ layer["wo"])
            hidden = torch.nn.functional.gelu(self.norm(x) @ layer["up"])
            x = x + self.branch_scale * self.all_reduce(hidden @ layer["down"])
            if self.args.extra_allreduce:
                # A synchronising all-reduce per layer (e.g. a debug norm check left in).
                check = x.float().pow(2).mean().reshape(1)
                self.all_reduce(check)
                x = x + 0 * check.to(x.dtype)
        logits = self.norm(x) @ self.lm_head
        return logits.argmax(-1)

    def draft(self, last, steps: int):  # type: ignore[no-untyped-def]
        """The cheap proposer: a bigram over the shared embedding (no communication)."""
        out = []
        token = last
        for _ in range(steps):
            token = (self.norm(self.draft_embed[token]) @ self.lm_head).argmax(-1)
            out.append(token)
        return self.torch.stack(out).reshape(-1)


class Rank:
    """One TP rank: the model, CUDA graphs for draft and verify, the per-cycle timer."""

    def __init__(self, args: argparse.Namespace, rank: int, tp: int) -> None:
        import torch

        self.torch = torch
        self.args, self.rank, self.tp = args, rank, tp
        self.cuda = args.device == "cuda"
        self.device = f"cuda:{rank}" if self.cuda else "cpu"
        self.model = Model(args, rank, tp, self.device)
        k = args.draft_tokens
        self.static_last = torch.zeros(1, dtype=torch.long, device=self.device)
        self.static_tokens = torch.zeros(k + 1, dtype=torch.long, device=self.device)
        self.static_pos = torch.arange(k + 1, device=self.device)
        self.verify_graph = self.draft_graph = None
        self.timing = None
        timing_dir = args.timing_dir or os.environ.get("PERFBISECT_VERIFY_TIMER_DIR")
        if timing_dir:
            os.makedirs(timing_dir, exist_ok=True)
            path = os.path.join(timing_dir, f"verify.rank{rank}.{os.getpid()}.jsonl")
            # Open for the rank's lifetime, line-buffered: ranks die by SIGKILL, no atexit.
            self.timing = open(path, "a", buffering=1)  # noqa: SIM115
        if self.cuda and args.verify_mode == "graph" and args.verify_input == "cache":
            self.capture()
        self.profiler = load_profiler(rank)  # after capture: graphs are never profiled

    def mark(self, name: str):  # type: ignore[no-untyped-def]
        return self.profiler.mark(name) if self.profiler is not None else NoMark()

    def capture(self) -> None:
        torch = self.torch
        k = self.args.draft_tokens
        m = self.model
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up outside the graph (NCCL, allocator)
            for _ in range(3):
                m.forward(self.static_tokens, self.static_pos, static=True)
                m.draft(self.static_last, k)
        torch.cuda.current_stream().wait_stream(stream)
        self.verify_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.verify_graph):
            self.verify_out = m.forward(self.static_tokens, self.static_pos, static=True)
        self.draft_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.draft_graph):
            self.draft_out = m.draft(self.static_last, k)

    def prefill(self, prompt: list[int]) -> int:
        torch = self.torch
        tokens = torch.tensor(prompt, device=self.device)
        positions = torch.arange(len(prompt), device=self.device)
        out = self.model.forward(tokens, positions)
        return int(out[-1])

    def verify(self, tokens: list[int], start: int, history: list[int]):  # type: ignore[no-untyped-def]
        """Target predictions for [last, drafts...] at ``start``..; timed; returns (preds, ms, graph)."""
        torch = self.torch
        k1 = len(tokens)
        graph = self.verify_graph is not None
        if graph:
            self.static_tokens.copy_(torch.tensor(tokens), non_blocking=True)
            self.static_pos.copy_(torch.arange(start, start + k1), non_blocking=True)
        elif self.args.verify_input == "prefix":
            full = torch.tensor(history + tokens, device=self.device)
            positions = torch.arange(len(history) + k1, device=self.device)
        else:
            inputs = torch.tensor(tokens, device=self.device)
            positions = torch.arange(start, start + k1, device=self.device)
        if self.cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
        else:
            t0 = time.perf_counter_ns()
        if graph:
            self.verify_graph.replay()
            out = self.verify_out
        elif self.args.verify_input == "prefix":
            out = self.model.forward(full, positions, use_cache=False)[-k1:]
        else:
            out = self.model.forward(inputs, positions)
        if self.cuda:
            end.record()
            preds = out.tolist()  # the cycle needs the tokens anyway: the sync happens here
            ms = begin.elapsed_time(end)
        else:
            ms = (time.perf_counter_ns() - t0) / 1e6
            preds = out.tolist()
        if self.timing is not None:
            line = {"t": time.time(), "ms": ms, "bs": 1, "graph": graph, "rank": self.rank}
            self.timing.write(json.dumps(line) + "\n")
        return preds, ms, graph

    def propose(self, last: int) -> list[int]:
        torch = self.torch
        if self.draft_graph is not None:
            self.static_last.fill_(last)
            self.draft_graph.replay()
            return self.draft_out.tolist()
        return self.model.draft(
            torch.tensor([last], device=self.device), self.args.draft_tokens
        ).tolist()

    def generate(self, cycles: int, prompt_len: int) -> dict:
        """Speculative cycles: draft k tokens, verify k+1, accept the agreeing prefix + 1."""
        prompt = [(7 * i + 3) % self.args.vocab for i in range(prompt_len)]
        history = list(prompt)  # tokens whose KV is in the cache
        last = self.prefill(prompt)
        out_tokens, records = [], []
        for cycle in range(cycles):
            if len(history) + self.args.draft_tokens + 2 > self.args.max_seq:
                break
            with self.mark("perfbisect.draft"):
                drafts = self.propose(last)
            if self.profiler is not None:
                self.profiler.before_verify()
            with self.mark("perfbisect.verify"):
                preds, ms, graph = self.verify([last, *drafts], len(history), history)
            accepted = 0
            while accepted < len(drafts) and drafts[accepted] == preds[accepted]:
                accepted += 1
            new = [last, *drafts[:accepted]]
            history.extend(new)
            out_tokens.extend([*drafts[:accepted], preds[accepted]])
            last = preds[accepted]
            records.append({"cycle": cycle, "ms": ms, "graph": graph, "accepted": accepted})
            if self.args.fail_rank == self.rank and cycle + 1 >= self.args.fail_after:
                os._exit(3)  # fault injection: a rank crashing mid-request
        return {"tokens": out_tokens, "cycles": records}


def rank_main(args: argparse.Namespace, rank: int, tp: int, port: int, conn) -> None:  # type: ignore[no-untyped-def]
    die_with_parent()
    try:
        import torch

        torch.set_num_threads(args.threads)
        if args.device == "cuda":
            torch.cuda.set_device(rank)
        # --group always: a process group (NCCL on a GPU) even for one rank, so the verify's
        # all-reduces run on a communicator and NCCL's own log exists at TP=1 too.
        if tp > 1 or args.group == "always":
            import torch.distributed as dist

            dist.init_process_group(
                "nccl" if args.device == "cuda" else "gloo",
                init_method=f"tcp://127.0.0.1:{port}",
                rank=rank,
                world_size=tp,
            )
        worker = Rank(args, rank, tp)
        if args.late_env != "none":
            # fault injection: a variable that reaches the rank only after its communicator was
            # made (the warm-up's collectives made it), as a framework that sets it in
            # os.environ too late would: NCCL, which read its settings then, never takes it
            name, _, value = args.late_env.partition(":")
            os.environ[name] = value
        conn.send(("ready", rank, worker.verify_graph is not None))
        while True:
            message = conn.recv()
            if message[0] == "stop":
                break
            result = worker.generate(message[1], message[2])
            conn.send(("result", rank, result))
    except (EOFError, KeyboardInterrupt):
        pass
    except BaseException:
        try:
            conn.send(("error", rank, traceback.format_exc()))
        except OSError:
            pass
        raise


# ---- the front (HTTP) ----------------------------------------------------------------------


class Front:
    def __init__(self, args: argparse.Namespace) -> None:
        import multiprocessing as mp

        self.args = args
        self.ctx = mp.get_context("spawn")
        self.ranks: list = []
        self.pipes: list = []
        self.graph = False
        self.ready = False
        self.failure: str | None = None
        self.lock = threading.Lock()

    def start(self) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        for rank in range(self.args.tp):
            parent, child = self.ctx.Pipe()
            proc = self.ctx.Process(
                target=rank_main, args=(self.args, rank, self.args.tp, port, child), daemon=True
            )
            proc.start()
            self.ranks.append(proc)
            self.pipes.append(parent)
        graphs = []
        for rank, pipe in enumerate(self.pipes):
            message = self.receive(rank, pipe, READY_TIMEOUT_S)
            graphs.append(message[2])
        self.graph = all(graphs)
        self.ready = True
        print(
            f"reference server ready: tp={self.args.tp} device={self.args.device} "
            f"verify graphs={'on' if self.graph else 'off'}",
            flush=True,
        )

    def receive(self, rank: int, pipe, timeout_s: float):  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout_s
        while not pipe.poll(0.2):
            proc = self.ranks[rank]
            if not proc.is_alive():
                raise RuntimeError(f"rank {rank} died (exit code {proc.exitcode})")
            if time.monotonic() > deadline:
                raise RuntimeError(f"rank {rank} did not answer within {timeout_s:.0f}s")
        message = pipe.recv()
        if message[0] == "error":
            raise RuntimeError(f"rank {rank} failed:\n{message[2]}")
        return message

    def generate(self, cycles: int, prompt_len: int) -> dict:
        with self.lock:
            for pipe in self.pipes:
                pipe.send(("generate", cycles, prompt_len))
            try:
                results = [
                    self.receive(r, p, REQUEST_TIMEOUT_S)[2] for r, p in enumerate(self.pipes)
                ]
            except RuntimeError as exc:
                raise RuntimeError(self.root_cause(str(exc))) from None
        first = results[0]
        accepted = [c["accepted"] for c in first["cycles"]]
        first["accept_length"] = (sum(accepted) / len(accepted) + 1) if accepted else 0.0
        first["rank_ms"] = [[c["ms"] for c in r["cycles"]] for r in results]
        return first

    def root_cause(self, error: str) -> str:
        """A rank that died takes its peers' collectives down with it: name the dead rank
        first, then what the others said (last line of their tracebacks)."""
        deadline = time.monotonic() + 5
        dead: list[int] = []
        while time.monotonic() < deadline and not dead:
            dead = [r for r, p in enumerate(self.ranks) if not p.is_alive() and p.exitcode]
            time.sleep(0.1)
        last_line = error.strip().splitlines()[-1] if error.strip() else error
        if not dead:
            return error
        first = dead[0]
        cause = f"rank {first} died (exit code {self.ranks[first].exitcode})"
        return cause if cause in error else f"{cause}; then: {last_line}"

    def stop(self) -> None:
        for pipe in self.pipes:
            try:
                pipe.send(("stop",))
            except OSError:
                pass
        for proc in self.ranks:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)


def make_handler(front: Front, server_ref: list):  # type: ignore[no-untyped-def]
    class Handler(BaseHTTPRequestHandler):
        def reply(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            params = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
            if path == "/health":
                ok = front.ready and front.failure is None
                self.reply(200 if ok else 503, {"ready": front.ready, "failure": front.failure})
            elif path == "/generate":
                try:
                    result = front.generate(
                        int(params.get("cycles", 16)), int(params.get("prompt", 16))
                    )
                except (RuntimeError, OSError, EOFError) as exc:
                    front.failure = str(exc)
                    self.reply(500, {"error": str(exc)})
                    threading.Thread(target=server_ref[0].shutdown, daemon=True).start()
                    return
                self.reply(200, result)
            else:
                self.reply(404, {"error": f"unknown path {path}"})

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def check_devices(args: argparse.Namespace) -> str | None:
    if args.device == "cuda":
        import torch

        count = torch.cuda.device_count()
        if args.tp > count:
            return f"--tp {args.tp} needs {args.tp} GPUs; {count} visible"
    elif args.tp > (os.cpu_count() or 1):
        return f"--tp {args.tp} on cpu needs {args.tp} cores; {os.cpu_count()} available"
    return None


def serve(args: argparse.Namespace) -> int:
    problem = check_devices(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        server = ThreadingHTTPServer(("127.0.0.1", args.port), BaseHTTPRequestHandler)
    except OSError as exc:
        print(f"error: port {args.port} is not available: {exc.strerror}", file=sys.stderr)
        return 2
    front = Front(args)
    ref = [server]
    server.RequestHandlerClass = make_handler(front, ref)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()  # /health answers 503 while the ranks start
    try:
        front.start()
        while serving.is_alive():
            serving.join(0.5)
            dead = [r for r, p in enumerate(front.ranks) if not p.is_alive()]
            if dead and front.failure is None:
                front.failure = f"rank {dead[0]} died (exit code {front.ranks[dead[0]].exitcode})"
                server.shutdown()
    except (RuntimeError, KeyboardInterrupt) as exc:
        front.failure = front.failure or str(exc)
    finally:
        server.server_close()
        front.stop()
    if front.failure:
        print(f"error: {front.failure}", file=sys.stderr)
        return 1
    return 0


def bench(args: argparse.Namespace) -> int:
    """Warm-up, then the measured request; prints the verify JSON lines of the measured window
    (every rank), one ``verify {...}`` line each, and the request's summary."""
    base = f"http://127.0.0.1:{args.port}"

    def generate(cycles: int) -> dict:
        url = f"{base}/generate?cycles={cycles}&prompt={args.prompt}"
        with urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT_S) as response:
            return json.load(response)

    try:
        generate(args.warmup)
        since = time.time()
        result = generate(args.cycles)
    except OSError as exc:
        body = getattr(exc, "read", lambda: b"")()
        print(
            f"error: the server failed the request: {exc} {body.decode(errors='replace')}",
            file=sys.stderr,
        )
        return 1
    timing_dir = args.timing_dir or os.environ.get("PERFBISECT_VERIFY_TIMER_DIR")
    lines = []
    for path in sorted(glob.glob(os.path.join(timing_dir or ".", "verify.rank*.jsonl"))):
        with open(path) as fh:
            for raw in fh:
                record = json.loads(raw)
                if record["t"] >= since:
                    lines.append(raw.strip())
    if not timing_dir:  # no timer files: the request's own per-rank timings
        for rank, values in enumerate(result["rank_ms"]):
            graph = all(c["graph"] for c in result["cycles"])
            lines += [
                json.dumps({"t": since, "ms": ms, "bs": 1, "graph": graph, "rank": rank})
                for ms in values
            ]
    for line in lines:
        print(f"verify {line}")
    print(f"summary cycles={len(result['cycles'])} accept_length={result['accept_length']:.3f}")
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command")
    s = sub.add_parser("serve")
    s.add_argument("--tp", type=int, default=1)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    s.add_argument("--layers", type=int, default=4)
    s.add_argument("--hidden", type=int, default=256)
    s.add_argument("--heads", type=int, default=4)
    s.add_argument("--vocab", type=int, default=512)
    s.add_argument("--draft-tokens", type=int, default=3)
    s.add_argument("--draft-noise", type=float, default=0.3, help="proposer imprecision")
    s.add_argument("--branch-scale", type=float, default=0.15, help="residual branch weight")
    s.add_argument("--max-seq", type=int, default=512)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    s.add_argument("--verify-mode", choices=["graph", "eager"], default="graph")
    s.add_argument("--verify-input", choices=["cache", "prefix"], default="cache")
    s.add_argument("--extra-allreduce", action="store_true")
    s.add_argument("--group", choices=["auto", "always"], default="auto")
    s.add_argument(
        "--late-env", default="none", help="fault injection: NAME:VALUE set after the group's init"
    )
    s.add_argument("--timing-dir")
    s.add_argument("--fail-rank", type=int, default=-1, help="fault injection: this rank exits")
    s.add_argument("--fail-after", type=int, default=1, help="... after this many cycles")
    b = sub.add_parser("bench")
    b.add_argument("--port", type=int, required=True)
    b.add_argument("--cycles", type=int, default=40)
    b.add_argument("--warmup", type=int, default=5)
    b.add_argument("--prompt", type=int, default=16)
    b.add_argument("--timing-dir")
    args = parser.parse_args(argv)
    if args.command is None:
        parser.error("choose serve or bench")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    return serve(args) if args.command == "serve" else bench(args)


if __name__ == "__main__":
    sys.exit(main())
