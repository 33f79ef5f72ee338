#!/bin/bash
# Issue 31 on the H200 machine: a real range of upstream SGLang (real.toml), each commit run from
# its source folder over SGLang 0.5.12's wheel set. One step per device call, outputs in $OUT:
#   stash    keep this call's carried parts (.gpu/p1, .gpu/p2) in /tmp/parts; check git/torch/GPU
#   go       stash, then set up (once per machine: sha256 of the parts, the wheels into python3,
#            perfbisect's wheels (.whl) into /tmp/site, the tiny models, the range repository
#            cloned to /tmp/sglang, an import smoke of both endpoints), then
#            `perfbisect bisect start --good GOOD --bad BAD` until the call's time is up
#   resume   `perfbisect bisect resume`, same limit (sets up first on a fresh machine whose
#            parts were stashed again; the history comes from $STATE_CARRY/pb.sqlite if carried)
# BUDGET_S (default 555): seconds from the call's start after which perfbisect gets SIGINT (its
# clean stop: the server torn down, the session saved) unless the launch in flight can finish.
# Another range or experiment (gpu_real2.sh sets these and sources this file): GOOD, BAD, EXP (the
# experiment file), RANGE_TAR (a tar of the range's bare repository), RANGE_DIR (its clone, the
# experiment's [target] repo), STATE (database, cache, experiment folder), SMOKE_PY (the
# interpreter of the import smoke), STATE_CARRY, and a `setup_hook` function run before the clone.
set -o pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd); repo=$(cd "$here/../../.." && pwd)
STATE=${STATE:-/tmp/pbreal}
export PERFBISECT_DB=$STATE/pb.db PERFBISECT_CACHE=$STATE/cache
GOOD=${GOOD:-0c19540550e1c488b6a6675b4909737d8f274fe2}  # #25335, first commit with 0.5.12's pins
BAD=${BAD:-314dedf7c6ecb19561499f965d4af84d4383b154}    # #25686, last before #25690
EXP=${EXP:-$here/real.toml}
RANGE_TAR=${RANGE_TAR:-/tmp/parts/sglang-range.git.tar}
RANGE_DIR=${RANGE_DIR:-/tmp/sglang}
SMOKE_PY=${SMOKE_PY:-python3}
STATE_CARRY=${STATE_CARRY:-.gpu/state}
work=$STATE/exp
deadline=$((SECONDS + ${BUDGET_S:-555}))
launch_s=${LAUNCH_S:-75}  # one launch, start to teardown, as the earlier runs measured it
mkdir -p /tmp/parts /tmp/pbreal "$STATE"
for d in .gpu/p1 .gpu/p2; do [ -d $d ] && cp $d/* /tmp/parts/; done
# the checkout's perfbisect first (the code under test), /tmp/site for its dependencies
[ -d /tmp/site ] && export PYTHONPATH=$repo:/tmp/site

setup() { base_setup && range_setup; }

# Once per machine, for every run: SGLang 0.5.12's wheel set into python3, perfbisect's wheels
# into /tmp/site, the tiny models. The range's tar need not travel (--ignore-missing), but the
# wheels' must verify. /tmp/pbreal/setup.ok is what this file's first version and
# ../explain_gpu/run_sglang.sh leave after the same set-up (and run 1's range).
base_setup() {
  if [ -f /tmp/pbreal/base.ok ] || [ -f /tmp/pbreal/setup.ok ]; then
    echo "base set up already"; return 0
  fi
  cd /tmp/parts || return 1
  ls -la
  cat wheels.part* > wheels.tar && sha256sum -c --ignore-missing SHA256SUMS | tee /tmp/pbreal/sums.txt || return 1
  grep -q '^wheels.tar: OK' /tmp/pbreal/sums.txt || { echo "wheels.tar not verified"; return 1; }
  rm -rf /tmp/w && mkdir -p /tmp/w && tar -xf wheels.tar -C /tmp/w || return 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir /tmp/w/wheels/*.whl || return 1
  echo "installed $(ls /tmp/w/wheels | wc -l) wheels (0.5.12's set less SGLang's own) into $(python3 -c 'import sys; print(sys.prefix)')"
  cd "$repo" || return 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || return 1
  export PYTHONPATH=$repo:/tmp/site
  python3 -c "import importlib.util as u; print('sglang importable outside the source tree:', u.find_spec('sglang') is not None)"
  python3 "$here/../sglang_gpu/make_tiny_models.py" /tmp/models || return 1
  touch /tmp/pbreal/base.ok
}

# Once per run: the run's own environment (setup_hook), the range repository cloned, the
# experiment in place.
range_setup() {
  [ -f "$STATE/run.ok" ] && { echo "run set up already"; return 0; }
  export PYTHONPATH=$repo:/tmp/site
  if declare -F setup_hook >/dev/null; then setup_hook || return 1; fi
  local bare
  bare=$(tar -tf "$RANGE_TAR" | awk -F/ 'NR == 1 {print $1}') || return 1  # awk reads to the end: no SIGPIPE under pipefail
  rm -rf "${STATE:?}/$bare" "$RANGE_DIR" && tar -xf "$RANGE_TAR" -C "$STATE" \
    && git clone -q "$STATE/$bare" "$RANGE_DIR" || return 1
  echo "range: $(git -C "$RANGE_DIR" rev-list --first-parent --count $GOOD..$BAD) commits after $GOOD, up to $BAD (shallow at $(head -1 "$RANGE_DIR/.git/shallow"))"
  mkdir -p $work && cp "$EXP" $work/perfbisect.toml || return 1
  touch "$STATE/run.ok"
  [ "$STATE" = /tmp/pbreal ] && touch /tmp/pbreal/setup.ok  # run 1's range too, as before
  return 0
}

# A wheel the smoke found missing, sent later: `carry` .gpu/extra with it, then `go` again.
# (Or stashed with a part: a wheel in .gpu/p1 lands in /tmp/parts.)
extra_wheels() {
  local found=()
  compgen -G "$repo/.gpu/extra/*.whl" >/dev/null && found+=("$repo"/.gpu/extra/*.whl)
  compgen -G "/tmp/parts/*.whl" >/dev/null && found+=(/tmp/parts/*.whl)
  [ ${#found[@]} -gt 0 ] || return 0
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "${found[@]}" \
    && echo "installed extra: ${found[*]##*/}"
}

# Both endpoints import SGLang's server, scheduler and EAGLE workers from source (no GPU), at
# once: a package the wheel set lacks shows here in seconds, not after a launch's minute. The V1
# worker (eagle_worker.py) is imported where the commit still has it (#25464 deleted it).
smoke() {
  local sha
  for sha in $GOOD $BAD; do
    rm -rf /tmp/smoke-$sha && git -C "$RANGE_DIR" worktree add -q --detach /tmp/smoke-$sha $sha
    (cd /tmp && PYTHONPATH=/tmp/smoke-$sha/python timeout 240 "$SMOKE_PY" -c "
import importlib, os, time; t = time.time()
import sglang, sglang.launch_server, sglang.srt.entrypoints.http_server, sglang.srt.managers.scheduler
import sglang.srt.model_executor.model_runner, sglang.srt.speculative.eagle_worker_v2
import sglang.srt.models.llama, sglang.srt.models.llama_eagle3
v1 = os.path.join(os.path.dirname(sglang.__file__), 'srt/speculative/eagle_worker.py')
if os.path.exists(v1):
    importlib.import_module('sglang.srt.speculative.eagle_worker')
print('imports ok in %.1fs from' % (time.time() - t), sglang.__file__, '(V1 worker %s)' % ('imported' if os.path.exists(v1) else 'absent'))") \
      > /tmp/smoke-$sha.log 2>&1 &
  done
  wait
  for sha in $GOOD $BAD; do
    echo "== $sha: $(git -C "$RANGE_DIR" log -1 --format='%cI %s' $sha)"
    cat /tmp/smoke-$sha.log
    git -C "$RANGE_DIR" worktree remove --force /tmp/smoke-$sha
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

main() {
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
      if [ -z "$SKIP_SMOKE" ]; then  # SKIP_SMOKE=1: both endpoints imported on this machine already
        smoke 2>&1 | tee "$OUT/smoke.txt" | tail -8
        grep -q "^== $BAD" "$OUT/smoke.txt" && [ "$(grep -c '^imports ok' "$OUT/smoke.txt")" = 2 ] \
          || { echo "smoke failed: see smoke.txt"; exit 1; }
      fi
      cd $work || exit 1
      { echo "\$ perfbisect bisect start --good $GOOD --bad $BAD --max-launches ${MAX_LAUNCHES:-3}"
        until_deadline bisect start --good $GOOD --bad $BAD --max-launches ${MAX_LAUNCHES:-3}
      } 2>&1 | tee "$OUT/bisect_go.txt" | tail -40
      record go
    else
      if [ ! -f $PERFBISECT_DB ] && [ -f "$repo/$STATE_CARRY/pb.sqlite" ]; then
        cp "$repo/$STATE_CARRY/pb.sqlite" $PERFBISECT_DB && echo "history restored from $STATE_CARRY"
      fi
      cd $work || exit 1
      { echo "\$ perfbisect bisect resume"; until_deadline bisect resume; } 2>&1 \
        | tee "$OUT/bisect_resume_${2:-1}.txt" | tail -60
      record "resume_${2:-1}"
    fi ;;
  explain)  # the session's culprit launched again with the profiler on ([explain] launches a side)
    { setup && echo "setup done at ${SECONDS}s"; } > "$OUT/setup.txt" 2>&1 || { cat "$OUT/setup.txt"; exit 1; }
    export PYTHONPATH=$repo:/tmp/site
    if [ ! -f $PERFBISECT_DB ] && [ -f "$repo/$STATE_CARRY/pb.sqlite" ]; then
      cp "$repo/$STATE_CARRY/pb.sqlite" $PERFBISECT_DB && echo "history restored from $STATE_CARRY"
    fi
    cd $work || exit 1
    { echo "\$ perfbisect bisect explain"; until_deadline bisect explain; } 2>&1 | tee "$OUT/explain.txt" | tail -40
    record explain ;;
  *) echo "usage: $(basename "$0") stash|go|resume [N]|explain"; exit 2 ;;
esac
}

# Run directly: one step; sourced (gpu_real2.sh): the functions, with its settings
if [ "${BASH_SOURCE[0]}" = "$0" ]; then main "$@"; fi
