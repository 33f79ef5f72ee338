#!/bin/bash
# The nccl axis on the H200 machine with two NCCL libraries found there (the system's
# libnccl2 and the one torch's nvidia-nccl wheel ships), through the reference target at TP=2:
# every launch must prove (from /proc/<pid>/maps) that the measured processes loaded the
# intended library. Outputs land in $OUT (committed under docs/examples/gpu/).
set -o pipefail
export PYTHONUNBUFFERED=1
[ -d .whl ] && { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site .whl/*.whl || exit 1; }  # else installed by an earlier call
export PYTHONPATH=/tmp/site:$PWD
export PERFBISECT_DB=/tmp/pbn.db PERFBISECT_CACHE=/tmp/pbncache
work=/tmp/ncclaxis; mkdir -p $work
if [ -n "$NCCL_LIBS" ]; then read -ra libs <<< "$NCCL_LIBS"  # the two to compare, given
else mapfile -t libs < <(find /usr /opt -name 'libnccl.so.2*' -type f 2>/dev/null | sort); fi
{
  echo "NCCL libraries on this machine:"
  for lib in "${libs[@]}"; do
    echo "  $lib -> $(python3 -c 'import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); c=ctypes.c_int(); l.ncclGetVersion(ctypes.byref(c)); v=c.value; print(f"{v//10000}.{v//100%100}.{v%100}")' "$lib")"
  done
} > "$OUT/nccl_axis.txt" 2>&1
a=${libs[0]}; b=${libs[-1]}
cat > $work/perfbisect.toml <<TOML
[target]
kind = "reference"
tp = 2
device = "cuda"
layers = 8
hidden = 2048
heads = 16
cycles = 30
warmup = 3
timeout_s = 300

[axes.nccl]
values = ["$a", "$b"]
TOML
cd $work
{ echo "\$ perfbisect bisect start --good nccl=$a --bad nccl=$b"; \
  timeout 400 python3 -m perfbisect bisect start --good "nccl=$a" --bad "nccl=$b"; \
  echo "exit code: $?"; } >> "$OUT/nccl_axis.txt" 2>&1
python3 -m perfbisect query history --json > "$OUT/nccl_history.json"
for id in $(python3 -c 'import json,sys; print(" ".join(str(l["id"]) for l in json.load(open(sys.argv[1]))))' "$OUT/nccl_history.json"); do
  python3 -m perfbisect query show "$id" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["launch"]["id"], d["launch"]["config"], d["launch"]["value"], d["snapshot"].get("launch", {}).get("notes"))'
done >> "$OUT/nccl_axis.txt" 2>&1
echo done
