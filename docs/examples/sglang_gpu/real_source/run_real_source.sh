#!/bin/bash
# Issue 17 part 1 on the H200 machine: SGLang 0.5.12's source rebuilt per step (prepare.py), a
# six-patch stack, the tiny Llama + EAGLE-3 draft, launched with tmux (good end, the search) and
# with sitecustomize (bad end): perfbisect bisect start ... --all-steps.  One step per call:
#   stash    keep this call's carried parts (.gpu/*) in /tmp/parts; check git, torch, the GPU
#   go       reassemble + install the wheels (all but SGLang's own: the source is what runs),
#            perfbisect's wheels (.whl) into /tmp/site, the tiny models, prepare.py, then start
#            the bisect until the call's time is up (BUDGET_S, default 560 s from the call's start)
#   resume   perfbisect bisect resume, same limit
# Each step writes the session's log, report, history and the launches' logs to $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../../../.." && pwd)
export PERFBISECT_DB=/tmp/pbsrc.db PERFBISECT_CACHE=/tmp/pbsrccache
work=/tmp/real-source
deadline=$((SECONDS + ${BUDGET_S:-560}))
launch_s=${LAUNCH_S:-50}  # one launch, start to teardown, as measured in the earlier runs
mkdir -p /tmp/parts && cp .gpu/* /tmp/parts/ 2>/dev/null
[ -x /tmp/gitx/usr/bin/git ] && export PATH=/tmp/gitx/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/gitx/lib
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site:$repo

# Run perfbisect until the deadline; stop it with SIGINT (as Ctrl-C) early when the launch in
# flight could not finish in the time left anyway, so no launch is cut off after it has measured.
# (A background job of a script starts with SIGINT ignored: the wrapper gives Python its own
# KeyboardInterrupt handler back, perfbisect's clean stop: servers torn down, state saved.)
until_deadline() {
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
      echo "[run_real_source] SIGINT with ${left}s left (launch in flight for ${age}s)"
      kill -INT $pid; break
    fi
  done
  local waited=0
  while kill -0 $pid 2>/dev/null && (( waited < 40 )); do sleep 1; waited=$((waited + 1)); done
  kill -KILL $pid 2>/dev/null
  wait $pid; echo "exit code: $?"
}

record() {
  cd $work || return
  python3 -m perfbisect bisect log > "$OUT/log_$1.txt" 2>&1
  python3 -m perfbisect bisect report > "$OUT/report_$1.txt" 2>&1
  python3 -m perfbisect bisect report --json > "$OUT/report_$1.json" 2>&1
  python3 -m perfbisect query history --json > "$OUT/history_$1.json" 2>&1
  tar -czf "$OUT/logs_$1.tgz" -C $PERFBISECT_CACHE logs 2>/dev/null
  ls $PERFBISECT_CACHE/logs/*/ > "$OUT/launch_dirs_$1.txt" 2>&1
  cp "$PERFBISECT_DB" "$OUT/history_$1.sqlite" 2>/dev/null
}

all=01-log-wording.patch+02-comment.patch+03-decode-log-interval.patch
all=$all+04-verify-out-of-graphs.patch+05-verify-host-sync.patch+06-docstring.patch
case "$1" in
  stash)
    ls -la /tmp/parts; git --version; nvidia-smi --query-gpu=name,driver_version --format=csv
    python3 -c "import torch, setuptools; print('torch', torch.__version__, 'gpus', torch.cuda.device_count(), 'setuptools', setuptools.__version__)" ;;
  go|hostloop)
    {
      if ! git --version >/dev/null 2>&1; then  # git travels when the image lacks it
        mkdir -p /tmp/gitx && tar -xzf /tmp/parts/gitdist.tgz -C /tmp/gitx || exit 1
        export PATH=/tmp/gitx/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/gitx/lib
      fi
      git --version
      cat /tmp/parts/sglang.part* > /tmp/sglang.tar && mkdir -p /tmp/w && tar -xf /tmp/sglang.tar -C /tmp/w || exit 1
      deps=$(ls /tmp/w/wheels/*.whl | grep -v '/sglang-0\.5\.12-')
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir $deps || exit 1
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
      echo "installed $(echo "$deps" | wc -l) wheels (not SGLang's own) into $(python3 -c 'import sys; print(sys.prefix)')"
      python3 -c "import importlib.util as u; print('sglang importable outside the source tree:', u.find_spec('sglang') is not None)"
      python3 "$here/../make_tiny_models.py" /tmp/models
      rm -rf $work && mkdir -p $work
      python3 "$here/prepare.py" /tmp/w/wheels/sglang-0.5.12-*.whl $work || exit 1
      if [ "$1" = go ]; then cp "$here/real_source.toml" $work/perfbisect.toml
      else cp "$here/real_source_hostloop.toml" $work/perfbisect.toml; fi
      echo "setup took ${SECONDS}s"
    } > "$OUT/setup.txt" 2>&1 || { cat "$OUT/setup.txt"; exit 1; }
    cat "$OUT/setup.txt"
    export PYTHONPATH=/tmp/site:$repo
    cd $work || exit 1
    if [ "$1" = hostloop ]; then
      { echo "\$ perfbisect bisect start --good v0.5.12,patches=none,launch=sitecustomize --bad v0.5.12,patches=05b-verify-host-loop.patch,launch=sitecustomize"
        until_deadline bisect start --good "v0.5.12,patches=none,launch=sitecustomize" \
          --bad "v0.5.12,patches=05b-verify-host-loop.patch,launch=sitecustomize"
      } 2>&1 | tee "$OUT/hostloop_start.txt" | tail -40
      record hostloop; exit
    fi
    { echo "\$ perfbisect bisect start --good v0.5.12,patches=none,launch=tmux --bad v0.5.12,patches=$all,launch=sitecustomize --all-steps"
      until_deadline bisect start --good "v0.5.12,patches=none,launch=tmux" \
        --bad "v0.5.12,patches=$all,launch=sitecustomize" --all-steps
    } 2>&1 | tee "$OUT/bisect_start.txt" | tail -40
    record start ;;
  resume)
    cd $work || exit 1
    { echo "\$ perfbisect bisect resume"; until_deadline bisect resume; } 2>&1 \
      | tee "$OUT/bisect_resume_${2:-1}.txt" | tail -60
    record "resume_${2:-1}" ;;
esac
