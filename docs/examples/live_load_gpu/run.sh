#!/bin/bash
# The live load benchmark on one GPU, as sent with the device tool (carry = [".whl"], the
# wheels perfbisect needs that the machine lacks; see docs/sglang.md "GPU tests"):
#   bash docs/examples/live_load_gpu/run.sh --n 40 --trials 20 --engines model,rules ...
# Every output lands in $OUT and is committed beside this script.
set -o pipefail
export PYTHONUNBUFFERED=1
# NVLink multicast stays off on the lent machines (KINDS.md), in every process started here.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
{
    git --version
    python3 -c 'import torch, perfbisect; print("torch", torch.__version__, torch.cuda.get_device_name())'
    nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu --format=csv
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
python3 docs/examples/live_load_gpu/calibrate.py cuda 2>&1 | tee "$OUT/calibrate.txt"
timeout "${BENCH_S:-480}" python3 benchmarks/live_load_bench.py --torch cuda "$@" 2>&1 |
    tee "$OUT/live_load_gpu.txt"
