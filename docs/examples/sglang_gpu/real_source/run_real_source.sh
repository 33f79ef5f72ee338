#!/bin/bash
# Issue 17 part 1 on the H200 machine, after ../gpu_sglang.sh stash x2 + install (the 0.5.12
# wheels in python3's environment, the tiny models in /tmp/models). Prepared, not run yet.
#   carry: the 0.5.12 wheel (for prepare.py) in .gpu/, perfbisect's wheels in .whl/
# Two launch methods, as the issue asks: tmux for the search, sitecustomize as a second run.
set -o pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../../../.." && pwd)
export PYTHONPATH=/tmp/site:$repo PERFBISECT_DB=/tmp/pbsrc.db PERFBISECT_CACHE=/tmp/pbsrccache
work=/tmp/real-source && rm -rf $work && mkdir -p $work && cd $work || exit 1
python3 "$here/prepare.py" /tmp/parts/sglang-0.5.12-*.whl $work > "$OUT/prepare.txt" 2>&1 || exit 1
cp "$here/real_source.toml" perfbisect.toml
all=01-log-wording.patch+02-comment.patch+03-decode-log-interval.patch+04-verify-out-of-graphs.patch+05-verify-host-sync.patch+06-docstring.patch
for method in ${METHODS:-tmux sitecustomize}; do
  { echo "\$ perfbisect bisect start --good v0.5.12,patches=none,launch=$method --bad v0.5.12,patches=$all,launch=$method"
    timeout ${PB_TIMEOUT:-540} python3 -m perfbisect bisect start --good "v0.5.12,patches=none,launch=$method" \
      --bad "v0.5.12,patches=$all,launch=$method"; echo "exit code: $?"
    python3 -m perfbisect bisect log
  } > "$OUT/real_source_$method.txt" 2>&1
  python3 -m perfbisect bisect report --json > "$OUT/real_source_${method}_report.json" 2>&1
done
python3 -m perfbisect query history --json > "$OUT/real_source_history.json" 2>&1
