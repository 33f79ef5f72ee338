#!/bin/bash
# Issue 31 on the H200 machine: a real range of upstream SGLang (real.toml), each commit run from
# its source folder over SGLang 0.5.12's wheel set. One step per device call, outputs in $OUT:
#   stash    keep this call's carried parts (.gpu/p1, .gpu/p2) in /tmp/parts; check git/torch/GPU
#   go       stash, then set up (once per machine: sha256 of the parts, the wheels into python3,
#            perfbisect's wheels (.whl) into /tmp/site, the tiny models, the range repository
#            cloned to /tmp/sglang, an import smoke of both endpoints), then
#            `perfbisect bisect start --good GOOD --bad BAD` until the call's time is up
#   resume   `perfbisect bisect resume`, same limit (sets up first on a fresh machine whose
#            parts were stashed again; the history comes from .gpu/state/pb.sqlite if carried)
# BUDGET_S (default 555): seconds from the call's start after which perfbisect gets SIGINT (its
# clean stop: the server torn down, the session saved) unless the launch in flight can finish.
set -o pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../../.." && pwd)
export PERFBISECT_DB=/tmp/pbreal/pb.db PERFBISECT_CACHE=/tmp/pbreal/cache
GOOD=${GOOD:-0c19540550e1c488b6a6675b4909737d8f274fe2}  # #25335, first commit with 0.5.12's pins
BAD=${BAD:-314dedf7c6ecb19561499f965d4af84d4383b154}    # #25686, last before #25690
work=/tmp/pbreal/exp
deadline=$((SECONDS + ${BUDGET_S:-555}))
launch_s=${LAUNCH_S:-75}  # one launch, start to teardown, as the earlier runs measured it
mkdir -p /tmp/parts /tmp/pbreal
for d in .gpu/p1 .gpu/p2; do [ -d $d ] && cp $d/* /tmp/parts/; done
# the checkout's perfbisect first (the code under test), /tmp/site for its dependencies
[ -d /tmp/site ] && export PYTHONPATH=$repo:/tmp/site

setup() {
  [ -f /tmp/pbreal/setup.ok ] && { echo "set up already"; return 0; }
  cd /tmp/parts || return 1
  ls -la
  cat wheels.part* > wheels.tar && sha256sum -c SHA256SUMS || return 1
  rm -rf /tmp/w && mkdir -p /tmp/w && tar -xf wheels.tar -C /tmp/w || return 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir /tmp/w/wheels/*.whl || return 1
  echo "installed $(ls /tmp/w/wheels | wc -l) wheels (0.5.12's set less SGLang's own) into $(python3 -c 'import sys; print(sys.prefix)')"
  cd "$repo" || return 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || return 1
  export PYTHONPATH=$repo:/tmp/site
  python3 -c "import importlib.util as u; print('sglang importable outside the source tree:', u.find_spec('sglang') is not None)"
  python3 "$here/../sglang_gpu/make_tiny_models.py" /tmp/models || return 1
  rm -rf /tmp/sglang-range.git /tmp/sglang && tar -xf /tmp/parts/sglang-range.git.tar -C /tmp \
    && mv /tmp/sglrange.git /tmp/sglang-range.git && git clone -q /tmp/sglang-range.git /tmp/sglang || return 1
  echo "range: $(git -C /tmp/sglang rev-list --first-parent --count $GOOD..$BAD) commits after $GOOD, up to $BAD (shallow at $(head -1 /tmp/sglang/.git/shallow))"
  mkdir -p $work && cp "$here/real.toml" $work/perfbisect.toml || return 1
  touch /tmp/pbreal/setup.ok
}

# A wheel the smoke found missing, sent later: `carry` .gpu/extra with it, then `go` again.
extra_wheels() {
  compgen -G "$repo/.gpu/extra/*.whl" >/dev/null || return 0
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "$repo"/.gpu/extra/*.whl \
    && echo "installed extra: $(cd "$repo/.gpu/extra" && ls ./*.whl | tr '\n' ' ')"
}

# Both endpoints import SGLang's server, scheduler and EAGLE workers from source (no GPU): a
# package the wheel set lacks shows here in seconds, not after a launch's minute.
smoke() {
  local sha
  for sha in $GOOD $BAD; do
    rm -rf /tmp/smoke-$sha && git -C /tmp/sglang worktree add -q --detach /tmp/smoke-$sha $sha
    echo "== $sha: $(git -C /tmp/sglang log -1 --format='%cI %s' $sha)"
    (cd /tmp && PYTHONPATH=/tmp/smoke-$sha/python timeout 240 python3 -c "
import time; t = time.time()
import sglang, sglang.launch_server, sglang.srt.entrypoints.http_server, sglang.srt.managers.scheduler
import sglang.srt.model_executor.model_runner, sglang.srt.speculative.eagle_worker, sglang.srt.speculative.eagle_worker_v2
import sglang.srt.models.llama, sglang.srt.models.llama_eagle3
print('imports ok in %.1fs from' % (time.time() - t), sglang.__file__)")
    git -C /tmp/sglang worktree remove --force /tmp/smoke-$sha
  done
}

until_deadline() {  # as run_real_source.sh: SIGINT before the call's limit, never mid-measure
  python3 -c 'import runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.argv = ["perfbisect", *sys.argv[1:]]
runpy.run_module("perfbisect", run_name="__main__")' "$@" &
  local pid=$! newest="" since=$SECONDS
  while kill -0 $pid 2>/dev/null; do
    sleep 2
    local now
    now=$(ls -d "$PERFBISECT_CACHE"/logs/*/*/ 2>/dev/null | sort | tail -1)
    [ "$now" != "$newest" ] && newest=$now since=$SECONDS
    local left=$((deadline - SECONDS)) age=$((SECONDS - since))
    if (( left < 8 || left < launch_s - age )); then
      echo "[gpu_real] SIGINT with ${left}s left (launch in flight for ${age}s)"
      kill -INT $pid; break
    fi
  done
  local waited=0
  while kill -0 $pid 2>/dev/null && (( waited < 40 )); do sleep 1; waited=$((waited + 1)); done
  kill -KILL $pid 2>/dev/null
  wait $pid; echo "exit code: $?"
}

record() {  # at most 6 files: $OUT takes 8 a call
  cd $work || return
  { python3 -m perfbisect bisect log; echo; python3 -m perfbisect bisect report; } > "$OUT/log_report_$1.txt" 2>&1
  python3 -m perfbisect bisect report --json > "$OUT/report_$1.json" 2>&1
  python3 -m perfbisect query history --json > "$OUT/history_$1.json" 2>&1
  tar -czf "$OUT/logs_$1.tgz" -C $PERFBISECT_CACHE logs 2>/dev/null
  cp "$PERFBISECT_DB" "$OUT/pb.sqlite" 2>/dev/null
}

case "$1" in
  stash)
    ls -la /tmp/parts; git --version; nvidia-smi --query-gpu=name,driver_version --format=csv
    python3 -c "import torch; print('torch', torch.__version__, 'gpus', torch.cuda.device_count())" ;;
  go|resume)
    { setup && echo "setup done at ${SECONDS}s" && extra_wheels; } > "$OUT/setup.txt" 2>&1 \
      || { cat "$OUT/setup.txt"; exit 1; }
    cat "$OUT/setup.txt"
    export PYTHONPATH=$repo:/tmp/site
    if [ "$1" = go ]; then
      smoke 2>&1 | tee "$OUT/smoke.txt" | tail -8
      grep -q "^== $BAD" "$OUT/smoke.txt" && [ "$(grep -c '^imports ok' "$OUT/smoke.txt")" = 2 ] \
        || { echo "smoke failed: see smoke.txt"; exit 1; }
      cd $work || exit 1
      { echo "\$ perfbisect bisect start --good $GOOD --bad $BAD --max-launches ${MAX_LAUNCHES:-3}"
        until_deadline bisect start --good $GOOD --bad $BAD --max-launches ${MAX_LAUNCHES:-3}
      } 2>&1 | tee "$OUT/bisect_go.txt" | tail -40
      record go
    else
      if [ ! -f $PERFBISECT_DB ] && [ -f "$repo/.gpu/state/pb.sqlite" ]; then
        cp "$repo/.gpu/state/pb.sqlite" $PERFBISECT_DB && echo "history restored from .gpu/state"
      fi
      cd $work || exit 1
      { echo "\$ perfbisect bisect resume"; until_deadline bisect resume; } 2>&1 \
        | tee "$OUT/bisect_resume_${2:-1}.txt" | tail -60
      record "resume_${2:-1}"
    fi ;;
  *) echo "usage: gpu_real.sh stash|go|resume [N]"; exit 2 ;;
esac
