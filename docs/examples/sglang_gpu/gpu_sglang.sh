#!/bin/bash
# On the H200 machine (device tool), one step per call; outputs in $OUT, committed here.
#   stash      keep this call's carried parts (.gpu/*) in /tmp/parts for later calls
#   install    reassemble the wheels (prepare_wheels.sh), install them into python3's
#              environment, perfbisect's own wheels (.whl) into /tmp/site, make the tiny models
#   tp1 | tp2  perfbisect bisect on tiny.toml at that TP (see the case lines for the specs):
#              tp1 varies graphs and the launch method (attribution must name graphs alone)
set -o pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PERFBISECT_DB=/tmp/pbsgl.db PERFBISECT_CACHE=/tmp/pbsglcache
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../../.." && pwd)
mkdir -p /tmp/parts && cp -v .gpu/* /tmp/parts/ 2>/dev/null
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site:$repo
pb() { python3 -m perfbisect "$@"; }
step() {
  local tp=$1 good=$2 bad=$3 dir=/tmp/sgl-tp$1
  mkdir -p $dir && sed "s/^tp = 1$/tp = $tp/" "$here/tiny.toml" > $dir/perfbisect.toml
  cd $dir || return 1
  { echo "\$ perfbisect bisect start --good $good --bad $bad   # tiny.toml with tp = $tp"
    timeout ${PB_TIMEOUT:-560} python3 -m perfbisect bisect start --good "$good" --bad "$bad"; echo "exit code: $?"
    echo "\$ perfbisect bisect log"; pb bisect log
  } > "$OUT/bisect_tp$tp.txt" 2>&1
  pb bisect report --json > "$OUT/report_tp$tp.json" 2>&1
  pb query history --json > "$OUT/history_tp$tp.json" 2>&1
  # every launch's server log tail (the whole log of the first), for the record
  find $PERFBISECT_CACHE -name serve.log | head -1 | xargs -r cp -t "$OUT/" 2>/dev/null
  tar -czf "$OUT/logs_tp$tp.tgz" -C $PERFBISECT_CACHE . 2>/dev/null
  cd "$repo"
}
case "$1" in
  stash) ls -la /tmp/parts ;;
  install)
    cat /tmp/parts/sglang.part* > /tmp/sglang.tar && mkdir -p /tmp/w && tar -xf /tmp/sglang.tar -C /tmp/w || exit 1
    { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir /tmp/w/wheels/*.whl \
        && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
        && echo "installed $(ls /tmp/w/wheels | wc -l) wheels into $(python3 -c 'import sys; print(sys.prefix)')"
      python3 -c "import sglang, sgl_kernel, torch; print('sglang', sglang.__version__, 'torch', torch.__version__, 'gpus', torch.cuda.device_count())"
      python3 "$here/make_tiny_models.py" /tmp/models
    } > "$OUT/install.txt" 2>&1; cat "$OUT/install.txt" ;;
  tp1) export PYTHONPATH=/tmp/site:$repo; step 1 graphs=on,launch=direct graphs=off,launch=tmux ;;
  tp2) export PYTHONPATH=/tmp/site:$repo; step 2 graphs=on,launch=sitecustomize graphs=off,launch=sitecustomize ;;
esac
