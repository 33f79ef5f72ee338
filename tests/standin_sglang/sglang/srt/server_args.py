"""Test double of SGLang's server args: the flags perfbisect passes, declared as 0.5.12 declares
them (perfbisect reads this file for "--cuda-graph-bs" and "--skip-server-warmup", as it reads
a real checkout's)."""

import argparse


def parser():
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
    p.add_argument("--cuda-graph-max-bs", type=int)
    p.add_argument("--cuda-graph-bs", type=int, nargs="+")
    p.add_argument("--skip-server-warmup", action="store_true")
    p.add_argument("--stand-in-batch", type=int, default=1)
    p.add_argument("--stand-in-never-ready", action="store_true")
    p.add_argument("--stand-in-http-error", action="store_true")
    p.add_argument("--stand-in-slow-weights", action="store_true")
    p.add_argument("--load-format", default="auto", choices=["auto", "dummy", "safetensors"])
    p.add_argument("--speculative-draft-load-format", default=None, choices=["auto", "dummy"])
    return p


def capture_sizes(args):
    """SGLang 0.5.12's batch sizes for speculative decoding (server_args.py
    _generate_cuda_graph_batch_sizes), or the --cuda-graph-bs list."""
    if args.cuda_graph_bs:
        return sorted(set(args.cuda_graph_bs))
    top = args.cuda_graph_max_bs or 24  # a stand-in's small default: fewer lines to print
    grid = [*range(1, 9), *range(10, 33, 2)]
    return sorted({*(bs for bs in grid if bs <= top), top})
