"""Read a GPU run's diagnostic launches again, here, with the current finding rules: the logs
(run_sglang.sh's logs.tgz: serve/measure logs, NCCL's files, the rank records) and one trace a
side (traces.tgz) of one explanation, as `bisect explain` would judge them now. No store: no
metric delta from ordinary launches, no hardware snapshots, no change description.

    python reread.py LOGS_DIR TRACES_DIR NAME [--json]
    # LOGS_DIR: the explanation's logs/explain-<id>/ folder from logs.tgz (0000-* good,
    # 0001-* bad); TRACES_DIR: holds NAME.good.json.gz and NAME.bad.json.gz (traces.tgz)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from perfbisect.cli.render_explain import render_why
from perfbisect.explain.judge import reread
from perfbisect.explain.model import Cost, Explanation


def main(logs: Path, traces: Path, name: str) -> int:
    launches = sorted(p for p in logs.iterdir() if p.is_dir())
    good, bad, judged = reread(
        launches, [traces / f"{name}.good.json.gz", traces / f"{name}.bad.json.gz"]
    )
    why = Explanation(
        metric="verify_ms",
        session_id=None,
        delta=None,
        delta_source=f"not measured: {name} read again from its logs (no store)",
        profiled_delta_ms=judged.measured,
        good=good,
        bad=bad,
        findings=judged.findings,
        not_measured=judged.not_measured,
        cost=Cost(None, None, "not measured (read again from logs)"),
    ).to_json()
    if "--json" in sys.argv:
        print(json.dumps(why, indent=1, default=str))
    else:
        render_why(why)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]))
