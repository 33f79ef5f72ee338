#!/bin/bash
# Issue 17 on the H200 machine (device tool), after `gpu_sglang.sh stash` (both wheel parts)
# and `gpu_sglang.sh install`; outputs in $OUT, committed here under out/.
#   models        the DeepSeek-V3-style config-only folders (make_dsv3_proxy_model.py)
#   smoke         one proxy launch of the DeepSeek-V3-style model, by hand, to see it serve
#   NAME          bisect docs/examples/sglang_gpu/NAME.toml (tiny_proxy | dsv3_proxy): a new
#                 session, or `bisect resume` of the one a call's time limit interrupted
#                 (perfbisect gets SIGINT at PB_TIMEOUT seconds: the session is saved)
set -o pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../../.." && pwd)
export PYTHONPATH=/tmp/site:$repo PERFBISECT_CACHE=/tmp/pbproxycache
pb() { python3 -m perfbisect "$@"; }
bisect() {
  local name=$1 good=$2 bad=$3 dir=/tmp/run-$1
  export PERFBISECT_DB=/tmp/$name.db
  mkdir -p $dir && cp "$here/$name.toml" $dir/perfbisect.toml && cd $dir || return 1
  if pb bisect status >/dev/null 2>&1; then
    cmd=(bisect resume)
  else
    cmd=(bisect start --good "$good" --bad "$bad")
  fi
  { echo "\$ perfbisect ${cmd[*]}   # $name.toml"
    timeout -s INT "${PB_TIMEOUT:-540}" python3 -m perfbisect "${cmd[@]}"; echo "exit code: $?"
  } 2>&1 | tee -a "$OUT/$name.txt"
  pb bisect log > "$OUT/${name}_log.txt" 2>&1
  pb bisect report --json > "$OUT/${name}_report.json" 2>&1
  pb query history --json > "$OUT/${name}_history.json" 2>&1
  tar -czf "$OUT/${name}_logs.tgz" -C $PERFBISECT_CACHE logs 2>/dev/null
  cd "$repo"
}
case "$1" in
  models) python3 "$here/make_dsv3_proxy_model.py" /tmp/models | tee "$OUT/models.txt" ;;
  smoke)
    python3 - <<'PY' 2>&1 | tee "$OUT/smoke.txt"
import json, pathlib
c = json.loads(pathlib.Path("/tmp/models/dsv3/config.json").read_text())
c.update(num_hidden_layers=8, n_routed_experts=16)
d = pathlib.Path("/tmp/models/dsv3-proxy-smoke"); d.mkdir(exist_ok=True)
(d / "config.json").write_text(json.dumps(c))
for t in ("tokenizer.json", "tokenizer_config.json"):
    (d / t).write_bytes(pathlib.Path("/tmp/models/dsv3", t).read_bytes())
print("smoke model", d)
PY
    timeout 240 python3 -m sglang.launch_server --model-path /tmp/models/dsv3-proxy-smoke \
      --load-format dummy --speculative-draft-load-format dummy \
      --speculative-algorithm EAGLE3 --speculative-draft-model-path /tmp/models/dsv3-eagle3 \
      --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 \
      --attention-backend triton --sampling-backend pytorch --grammar-backend none \
      --mem-fraction-static 0.5 --max-running-requests 8 --disable-piecewise-cuda-graph \
      --context-length 2048 --cuda-graph-max-bs 8 --port 30123 > /tmp/smoke.log 2>&1 &
    for i in $(seq 1 220); do
      curl -sf -m 5 http://127.0.0.1:30123/health_generate >/dev/null && { echo "ready after ${i}s"; break; }
      kill -0 $! 2>/dev/null || { echo "server exited"; break; }; sleep 1
    done 2>&1 | tee -a "$OUT/smoke.txt"
    curl -s -m 30 http://127.0.0.1:30123/generate -d '{"text":"hello","sampling_params":{"max_new_tokens":16}}' | head -c 400 | tee -a "$OUT/smoke.txt"
    kill %1 2>/dev/null; sleep 3; pkill -f sglang.launch_server; cp /tmp/smoke.log "$OUT/smoke_serve.log" ;;
  tiny_proxy) bisect tiny_proxy graphs=on graphs=off ;;
  dsv3_proxy) bisect dsv3_proxy graph_bs=covers graph_bs=below ;;
esac
