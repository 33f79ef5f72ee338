"""perfbisect's workload client for an SGLang server (standalone: copied to the host).

Warm-up requests first (not measured), then the measured requests with the given concurrency
against ``/generate``; then prints the verify timer's JSON lines written during the measured
window (``verify {...}``) and one summary line with client-side tokens/s and the accept length
the server reports (``/server_info`` from 0.5.9, ``/get_server_info`` before). An HTTP error is
a clear message and exit 1, never a hang (every request has a timeout).

    python workload.py --port P --timing-dir D [--requests 32 --concurrency 4 --max-new-tokens 256]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

PROMPTS = [
    "Explain how speculative decoding speeds up large language model inference.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "List five practical tips for debugging distributed GPU programs.",
    "Summarise the causes and consequences of the industrial revolution.",
    "Describe the water cycle to a ten-year-old.",
    "What are the trade-offs between tensor parallelism and pipeline parallelism?",
]


def post(base: str, prompt: str, max_new_tokens: int, timeout: float) -> int:
    body = json.dumps(
        {
            "text": prompt,
            # greedy and a fixed length: every request runs the same number of verify cycles
            "sampling_params": {
                "max_new_tokens": max_new_tokens,
                "temperature": 0,
                "ignore_eos": True,
            },
        }
    ).encode()
    request = urllib.request.Request(
        f"{base}/generate", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        data = json.load(response)
    return int(data.get("meta_info", {}).get("completion_tokens", 0))


def accept_length(base: str) -> float | None:
    for path in ("/server_info", "/get_server_info"):
        try:
            with urllib.request.urlopen(base + path, timeout=10) as response:
                info = json.load(response)
        except (urllib.error.URLError, OSError, ValueError):
            continue
        states = info.get("internal_states") or [info]
        for state in states:
            value = state.get("avg_spec_accept_length")
            if value is not None:
                return float(value)
    return None


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--timing-dir", required=True)
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--prompts", help="a file with one prompt per line")
    p.add_argument("--timeout", type=float, default=600)
    args = p.parse_args()
    base = f"http://127.0.0.1:{args.port}"
    prompts = PROMPTS
    if args.prompts:
        with open(args.prompts) as fh:
            prompts = [line.strip() for line in fh if line.strip()] or PROMPTS
    try:
        for i in range(args.warmup):
            post(base, prompts[i % len(prompts)], args.max_new_tokens, args.timeout)
        since = time.time()
        start = time.perf_counter()
        with ThreadPoolExecutor(args.concurrency) as pool:
            tokens = sum(
                pool.map(
                    lambda i: post(
                        base, prompts[i % len(prompts)], args.max_new_tokens, args.timeout
                    ),
                    range(args.requests),
                )
            )
        wall = time.perf_counter() - start
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        print(f"error: the server answered HTTP {exc.code} to /generate: {detail}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"error: /generate failed: {exc}", file=sys.stderr)
        return 1
    for path in sorted(glob.glob(os.path.join(args.timing_dir, "verify.rank*.jsonl"))):
        with open(path) as fh:
            for raw in fh:
                try:
                    if json.loads(raw)["t"] >= since:
                        print("verify " + raw.strip())
                except (ValueError, KeyError):
                    continue
    accept = accept_length(base)
    print(
        f"summary requests={args.requests} tokens={tokens} tokens_per_s={tokens / wall:.2f}"
        + (f" accept_length={accept:.3f}" if accept is not None else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
