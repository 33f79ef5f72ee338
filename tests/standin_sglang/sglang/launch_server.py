"""Test double of `python -m sglang.launch_server` (SGLang itself needs a GPU).

It parses the flags perfbisect passes, verifies each request in cycles through the ModelRunner
above (so the real verify timer, installed by perfbisect, wraps a real method call), prints
SGLang's log lines (decode batches, the ready line) and serves /health_generate, /generate and
/server_info. --disable-cuda-graph makes verify slower and eager, as on a GPU. Verify time
scales with the model's depth (`num_hidden_layers` of its config.json; 8 without one), as a
proxy launch's fewer layers do on a GPU. Flags that only exist here: --stand-in-never-ready,
--stand-in-http-error, --stand-in-slow-weights (slower only with real weights: a regression a
`--load-format dummy` proxy cannot show), --stand-in-batch N (the running batch of every
verify: above --cuda-graph-max-bs it runs eager, as SGLang's CudaGraphRunner.can_run says).
"""

import concurrent.futures
import http.server
import json
import os
import sys
import threading
import time
from datetime import datetime

from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.server_args import capture_sizes, parser

COMPILE_S = 0.4  # a stand-in's kernel compilation: what a warm compile cache saves


def log(message):
    """A line in SGLang's own format (configure_logger; milliseconds with SGLANG_LOG_MS)."""
    now = datetime.now()
    ms = f".{now.microsecond // 1000:03d}" if os.environ.get("SGLANG_LOG_MS") else ""
    print(f"[{now:%Y-%m-%d %H:%M:%S}{ms}] {message}", file=sys.stderr, flush=True)


def compile_kernels(name):
    """Compile once per Triton cache: a cold cache costs COMPILE_S and leaves a kernel file."""
    folder = os.environ.get("TRITON_CACHE_DIR") or os.path.expanduser("~/.triton/cache")
    kernel = os.path.join(folder, f"{name}.cubin")
    if os.path.exists(kernel):
        return
    time.sleep(COMPILE_S)
    os.makedirs(folder, exist_ok=True)
    with open(kernel, "w") as f:
        f.write("stand-in kernel\n")


def start_up(args, speculative):
    """SGLang's start-up milestones (startup.py reads them), with the graphs it captures."""
    log(f"server_args=ServerArgs(model_path={args.model_path!r}, tp_size={args.tp_size})")
    log("Init torch distributed begin.")
    log("Load weight begin. avail mem=139.13 GB")
    log("Load weight end. elapsed=0.11 s, type=LlamaForCausalLM, avail mem=138.90 GB")
    log("KV Cache is allocated. #tokens: 1130738, K size: 17.25 GB, V size: 17.25 GB")
    log("Memory pool end. avail mem=104.37 GB")
    sizes = capture_sizes(args)
    if not args.disable_cuda_graph:
        log("Capture cuda graph begin. This can take up to several minutes. avail mem=104.28 GB")
        log(f"Capture cuda graph bs {sizes}")
        tic = time.perf_counter()
        compile_kernels("target_verify")
        time.sleep(0.002 * len(sizes))
        log(f"Capture cuda graph end. Time elapsed: {time.perf_counter() - tic:.2f} s.")
    if speculative:
        log("Init torch distributed begin.")
        log("Load weight end. elapsed=0.01 s, type=LlamaForCausalLMEagle3, avail mem=104.18 GB")
        log("Memory pool end. avail mem=99.86 GB")
        if not args.disable_cuda_graph:
            log("Capture draft cuda graph begin. This can take up to several minutes.")
            tic = time.perf_counter()
            time.sleep(0.002 * len(sizes))
            log(f"Capture draft cuda graph end. Time elapsed: {time.perf_counter() - tic:.2f} s.")
    log(f"INFO:     Started server process [{os.getpid()}]")
    if not args.skip_server_warmup:
        time.sleep(0.2)  # SGLang's own warm-up request
        log('INFO:     127.0.0.1:40000 - "POST /generate HTTP/1.1" 200 OK')


class Mode:
    def is_target_verify(self):
        return True


class Batch:
    forward_mode = Mode()
    batch_size = 1


class DecodeMode:
    def is_target_verify(self):
        return False


class DecodeBatch:
    forward_mode = DecodeMode()
    batch_size = 1


def main():
    args = parser().parse_args()
    print("[stand-in] argv: " + json.dumps(sys.argv[1:]), file=sys.stderr, flush=True)
    config_file = os.path.join(args.model_path, "config.json")
    layers = 8
    if os.path.exists(config_file):
        with open(config_file) as f:
            layers = int(json.load(f).get("num_hidden_layers", 8))
    print(f"[stand-in] layers: {layers}, load format: {args.load_format}", file=sys.stderr)
    if args.port + 10000 > 65535:  # as SGLang 0.5.12's server_args does for its gRPC port
        raise ValueError(f"SGLANG_GRPC_PORT ({args.port + 10000}) must be between 1 and 65535")
    graph = not args.disable_cuda_graph
    if graph:  # start_up prints the captured sizes; a batch above them runs eager
        graph = args.stand_in_batch <= max(capture_sizes(args))
    Batch.batch_size = args.stand_in_batch
    cost = (2.0 if graph else 6.0) * layers / 8
    if args.stand_in_slow_weights and args.load_format != "dummy":
        cost += 3.0
    runners = [ModelRunner(r, cost, graph) for r in range(args.tp_size)]
    speculative = args.speculative_algorithm is not None
    accept = args.speculative_num_draft_tokens if speculative else 1
    # Without speculation every token is one decode forward (1 ms per 8 layers, graphs or
    # not): a stand-in's numbers, chosen so that speculation wins at 2 ms verify and loses at 6.
    decoders = [ModelRunner(r, 1.0 * layers / 8, graph) for r in range(args.tp_size)]
    lock = threading.Lock()
    scheduler = concurrent.futures.ThreadPoolExecutor(max_workers=1)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/health_generate":
                self._send(503 if args.stand_in_never_ready else 200, {})
            elif self.path in ("/server_info", "/get_server_info"):
                self._send(200, {"internal_states": [{"avg_spec_accept_length": accept}]})
            else:
                self._send(404, {})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if args.stand_in_http_error:
                self._send(400, {"error": "stand-in refuses this request"})
                return
            tokens = body["sampling_params"]["max_new_tokens"]

            def decode():
                for _ in range(max(1, tokens // accept)):
                    for runner in runners if speculative else decoders:
                        runner.forward(Batch() if speculative else DecodeBatch())

            # One forward at a time on one thread, as SGLang's scheduler runs them (the verify
            # timer's profiler is started and stopped in the thread that runs the forwards).
            with lock:
                scheduler.submit(decode).result()
                print(
                    f"[stand-in] Decode batch, #running-req: 1, #token: {tokens}, token usage: "
                    f"0.01, accept len: {accept:.2f}, accept rate: 1.00, cuda graph: {graph}, "
                    f"gen throughput (token/s): 123.45, #queue-req: 0",
                    file=sys.stderr,
                    flush=True,
                )
            self._send(200, {"text": "x", "meta_info": {"completion_tokens": tokens}})

        def _send(self, code, data):
            raw = json.dumps(data).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer((args.host, args.port), Handler)
    if args.tp_size > 1:
        print("[stand-in] sglang is using nccl==2.27.7", file=sys.stderr, flush=True)
    start_up(args, speculative)
    if not args.stand_in_never_ready:
        log("The server is fired up and ready to roll!")
    server.serve_forever()


if __name__ == "__main__":
    main()
