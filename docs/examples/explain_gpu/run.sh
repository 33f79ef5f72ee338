#!/bin/bash
# `perfbisect bisect explain` on the GPU machine (2 GPUs), through the reference target at TP=2
# with NCCL: (1) a commit that takes verify out of its CUDA graph (--verify-mode eager by
# default): expect "verify in CUDA graphs: 100% -> 0%", kernels per verify up by ~100x, the GEMM
# and all-reduce kernels named, NCCL kernels' algorithm/protocol per call site; (2) the same
# commit launched direct vs sitecustomize with NCCL tuning in [env]: the NCCL table shows what
# each communicator took from the environment. Real NCCL_DEBUG=INFO files and one trace per
# side are copied to $OUT (replace tests/data/nccl_info_tp2.log with them).
# Run from the repository root: OUT=/some/dir bash docs/examples/explain_gpu/run.sh
# Dry run on a machine without GPUs: DEVICE=cpu TP=1 (no NCCL then; the run still goes through).
set -o pipefail
export PYTHONUNBUFFERED=1
[ -d .whl ] && { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site .whl/*.whl || exit 1; export PYTHONPATH=/tmp/site:$PWD; }
OUT=${OUT:-/tmp/explain_out}; DEVICE=${DEVICE:-cuda}; TP=${TP:-2}; PY=${PYTHON:-python3}
mkdir -p "$OUT"
work=$(mktemp -d /tmp/explain_gpu.XXXX)
export PERFBISECT_DB=sqlite:///$work/pb.db PERFBISECT_CACHE=$work/cache
pb() { "$PY" -m perfbisect "$@"; }
server=$("$PY" -c 'from perfbisect.targets.reference.target import SERVER; print(SERVER)') || exit 1
git init -q -b main "$work/repo" && cd "$work/repo" || exit 1
git config user.email e@example.com && git config user.name explain
cp "$server" server.py && git add server.py && git commit -qm "reference server"
good=$(git rev-parse HEAD)
sed -i 's/choices=\["graph", "eager"\], default="graph"/choices=["graph", "eager"], default="eager"/' server.py
grep -q 'default="eager"' server.py || { echo "the planted edit did not apply" >&2; exit 1; }
git commit -qam "verify: run eagerly so accept-length debugging sees every op"
bad=$(git rev-parse HEAD)
cd "$work"
cat > perfbisect.toml <<TOML
[target]
kind = "reference"
repo = "repo"
tp = $TP
device = "$DEVICE"
layers = 8
hidden = 1024
heads = 16
max_seq = 640
prompt = 256
cycles = 30
warmup = 3
timeout_s = 300

[env]
NCCL_ALGO = "Ring"
NCCL_PROTO = "Simple"

[explain]
launches = 2
cycles = 8
skip = 5
TOML
{ echo "\$ perfbisect bisect explain --good $good --bad $bad"; \
  timeout 500 "$PY" -m perfbisect bisect explain --good "$good" --bad "$bad" --json \
      > "$OUT/explain_commit.json"; echo "exit code: $?"; } > "$OUT/explain_commit.txt" 2>&1
"$PY" - "$OUT/explain_commit.json" >> "$OUT/explain_commit.txt" 2>&1 <<'PYTHON'
import json, sys
from perfbisect.cli.render_explain import render_why
render_why(json.load(open(sys.argv[1])))
PYTHON
{ echo "\$ perfbisect bisect explain --good launch=direct --bad launch=sitecustomize"; \
  timeout 500 "$PY" -m perfbisect bisect explain --good "commit=$good,launch=direct" \
      --bad "commit=$good,launch=sitecustomize"; echo "exit code: $?"; } \
    > "$OUT/explain_launch.txt" 2>&1
mkdir -p "$OUT/nccl_logs" "$OUT/traces"
find "$work/cache/logs" -name 'nccl.*' -exec cp {} "$OUT/nccl_logs/" \; 2>/dev/null
find "$work/cache/logs" -name 'trace.rank0.*.json' | head -2 | xargs -r -I{} cp {} "$OUT/traces/"
ls -la "$OUT" "$OUT/nccl_logs" "$OUT/traces"
echo "work folder: $work"
