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

import argparse
import concurrent.futures
import http.server
import json
import os
import sys
import threading

from sglang.srt.model_executor.model_runner import ModelRunner


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
    p = argparse.ArgumentParser()
    p.add_argument("--model-path", required=True)
    p.add_argument("--speculative-algorithm")
    p.add_argument("--speculative-draft-model-path")
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--tp-size", type=int, required=True)
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--cuda-graph-max-bs", type=int, default=8)
    p.add_argument("--stand-in-batch", type=int, default=1)
    p.add_argument("--stand-in-never-ready", action="store_true")
    p.add_argument("--stand-in-http-error", action="store_true")
    p.add_argument("--stand-in-slow-weights", action="store_true")
    p.add_argument("--load-format", default="auto", choices=["auto", "dummy", "safetensors"])
    p.add_argument("--speculative-draft-load-format", default=None, choices=["auto", "dummy"])
    args = p.parse_args()
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
    if graph:  # SGLang's line when it captures the target's decode graphs
        captured = list(range(1, args.cuda_graph_max_bs + 1))
        print(f"Capture cuda graph bs {captured}", file=sys.stderr, flush=True)
        graph = args.stand_in_batch <= args.cuda_graph_max_bs
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
    if not args.stand_in_never_ready:
        print("The server is fired up and ready to roll!", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
