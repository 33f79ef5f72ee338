"""A tiny speculative-decoding stand-in: every cycle runs a 'verify' over the draft tokens.

Serves /health and /generate?cycles=N on 127.0.0.1 and reports per-cycle verify time.
"""

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

CONFIG = {
    "hidden": 48,
    "draft_tokens": 4,
    "prefix": 32,
}
# @@LOGGING@@

WEIGHTS = [[((i * 31 + j * 17) % 13 - 6) / 13.0 for j in range(CONFIG["hidden"])]
           for i in range(CONFIG["hidden"])]


def layer(vector):
    return [sum(w * x for w, x in zip(row, vector)) for row in WEIGHTS]


def verify(cache, draft):
    # The KV cache holds the prefix: only the draft tokens go through the layer.
    tokens = draft  # @@VERIFY_INPUT@@
    out = [layer(token) for token in tokens]
    return out


def cycle(cache, step):
    draft = [[((step + t + k) % 7) / 7.0 for k in range(CONFIG["hidden"])]
             for t in range(CONFIG["draft_tokens"])]
    start = time.perf_counter_ns()
    verify(cache, draft)
    return (time.perf_counter_ns() - start) / 1e6


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/health":
            self._reply(200, {"ok": True})
        elif url.path == "/generate":
            cycles = int(parse_qs(url.query).get("cycles", ["20"])[0])
            cache = [[0.5] * CONFIG["hidden"] for _ in range(CONFIG["prefix"])]
            timings = [cycle(cache, step) for step in range(cycles)]
            self._reply(200, {"verify_ms": timings})
        else:
            self._reply(404, {"error": "not found"})

    def _reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main():
    port = int(sys.argv[sys.argv.index("--port") + 1])
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
