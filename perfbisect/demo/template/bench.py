"""Ask the server for speculative cycles; print one `verify_ms=` line per cycle."""

import json
import sys
import urllib.request

port = int(sys.argv[sys.argv.index("--port") + 1])
cycles = int(sys.argv[sys.argv.index("--cycles") + 1]) if "--cycles" in sys.argv else 30
with urllib.request.urlopen(f"http://127.0.0.1:{port}/generate?cycles={cycles}", timeout=60) as r:
    timings = json.load(r)["verify_ms"]
for ms in timings[3:]:  # the first cycles warm up caches
    print(f"verify_ms={ms:.4f}")
