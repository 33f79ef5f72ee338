#!/bin/bash
# The GPU validation run on the H200 machine (2 GPUs), as sent with the device tool:
# wheels for what the machine lacks were carried in .whl/ (see README "GPU machine").
# Every output lands in $OUT and is committed under docs/examples/gpu/.
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PERFBISECT_DB=/tmp/pb.db PERFBISECT_CACHE=/tmp/pbcache
pb() { python3 -m perfbisect "$@"; }
run() { echo "\$ $*"; "$@"; }
{
  run pb probe hardware
  run pb probe env-propagation --gpu --method direct,tmux,sitecustomize \
      --env NCCL_ALGO=Ring --env NCCL_PROTO=Simple --env NCCL_MIN_NCHANNELS=4 \
      --watch NCCL_NVLS_ENABLE --watch NCCL_DEBUG
} > "$OUT/probes.txt" 2>&1
pb probe hardware --json > "$OUT/probe_hardware.json" 2>/dev/null
pb probe env-propagation --gpu --method direct,tmux,sitecustomize \
    --env NCCL_ALGO=Ring --env NCCL_PROTO=Simple --env NCCL_MIN_NCHANNELS=4 \
    --watch NCCL_NVLS_ENABLE --json > "$OUT/env_propagation_gpu.json" 2>/dev/null
echo "probes done"
{ echo "\$ perfbisect demo --gpu --dir /tmp/demo"; timeout 300 pb demo --gpu --dir /tmp/demo; } \
    > "$OUT/demo_gpu.txt" 2>&1
echo "demo done: exit $?"
{ echo "\$ python3 docs/examples/reference_matrix.py --tp 1 2"; \
  timeout 280 python3 docs/examples/reference_matrix.py --tp 1 2 --out "$OUT/reference_matrix.json"; } \
    > "$OUT/reference_matrix.txt" 2>&1
echo "matrix done: exit $?"
