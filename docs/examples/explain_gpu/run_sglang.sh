#!/bin/bash
# Issue 32 on one H200, one device call: `perfbisect bisect explain` on real evidence, in order
# of priority (STEPS), each step only if the time left covers it (BUDGET_S from the call's
# start, default 515 s; perfbisect gets SIGINT, its clean stop, before the budget runs out):
#   nccl     real NCCL_DEBUG=INFO logs of one-rank communicators (nccl_capture.py): the tuning
#            variables in the process's environment from its start (env), set in os.environ
#            after the first communicator was made (late), removed by the launcher (stripped)
#   eager    SGLang (source at 3117415c9bcd) none vs patch 04 (target-verify out of graphs)
#   sync     SGLang none vs patch 05 (a .item() at the start of CudaGraphRunner.replay)
#   dsv3     the DeepSeek-V3-style proxy, --cuda-graph-max-bs 8 vs 2 (running batch 8)
#   refnccl  the reference target at TP=1 with a one-rank NCCL group (--group always), the
#            same commit launched direct (good) vs in tmux (bad) whose server's global
#            environment carries NCCL_MAX_NCHANNELS=4 NCCL_PROTO=Simple NCCL_ALGO=Ring: a
#            launch-axis difference in NCCL tuning variables, read from NCCL's own log (at one
#            rank it says the first, 64 -> 4 channels; the others it never reads there)
#   reflate  the reference target as in refnccl, a custom axis: NCCL_MAX_NCHANNELS=4 put into the
#            rank's os.environ after its communicator was made (--late-env, fault injection) vs
#            not: the seed's failure, "in the environment but not taken by the communicator" (a
#            parameter NCCL reads at init: NCCL_PROTO/ALGO are never read at one rank)
# Set-up: none when docs/examples/sglang_real/gpu_real.sh ran on this machine (it leaves
# /tmp/pbreal/setup.ok: wheels in python3, perfbisect's dependencies in /tmp/site, the tiny
# models, the range repository in /tmp/sglang); otherwise it is done here from the parts that
# `gpu_real.sh stash` kept (.gpu/p1) and this call's carry (.gpu/p2, .whl). Carry .gpu/explain
# too (HolisticTraceAnalysis's wheel, 0.4 MB) so that HTA parses the traces there.
# Outputs in $OUT (8 files at most come back): summary.txt (every explanation as text),
# setup.txt, nccl.tgz, explain_json.tgz, traces.tgz, logs.tgz.
# CPU dry run (no GPU, no SGLang): DEVICE=cpu STEPS="refnccl" OUT=/tmp/x bash run_sglang.sh
set -o pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../../.." && pwd)
OUT=${OUT:?set OUT}; DEVICE=${DEVICE:-cuda}; STEPS=${STEPS:-"nccl eager sync dsv3 refnccl reflate"}
COMMIT=3117415c9bcd00ec06835eaae06690d53d18a334   # SGLang main where v0.5.12 forks
deadline=$((SECONDS + ${BUDGET_S:-515}))
work=/tmp/pbexplain; res=$work/out
# the cache (worktrees, the pin set's environment) and the history stay for a later call on the
# same machine: a configuration's first launch from a new worktree took ~125 s, later ones ~50
rm -rf $res $work/ref $work/reflate $work/tmux && mkdir -p $res/nccl $res/json $res/traces
export PERFBISECT_DB=sqlite:///$work/pb.db PERFBISECT_CACHE=$work/cache
summary=$OUT/summary.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
left() { echo $((deadline - SECONDS)); }

setup() {
  if [ "$DEVICE" != cuda ]; then
    export PYTHONPATH=$repo:${PYTHONPATH:-}; echo "CPU dry run: no set-up"; return 0
  fi
  if [ -f /tmp/pbreal/setup.ok ]; then
    echo "set up already (gpu_real.sh)"
  else
    mkdir -p /tmp/parts && for d in .gpu/p1 .gpu/p2; do [ -d $d ] && cp $d/* /tmp/parts/; done
    cd /tmp/parts && cat wheels.part* > wheels.tar && sha256sum -c SHA256SUMS || return 1
    rm -rf /tmp/w && mkdir -p /tmp/w && tar -xf wheels.tar -C /tmp/w || return 1
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir /tmp/w/wheels/*.whl || return 1
    compgen -G "/tmp/parts/*.whl" >/dev/null && python3 -m pip install -q --no-index --no-deps \
      --no-compile --no-cache-dir /tmp/parts/*.whl
    cd "$repo" && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --target /tmp/site .whl/*.whl || return 1
    python3 "$repo/docs/examples/sglang_gpu/make_tiny_models.py" /tmp/models || return 1
    rm -rf /tmp/sglang-range.git /tmp/sglang && tar -xf /tmp/parts/sglang-range.git.tar -C /tmp \
      && mv /tmp/sglrange.git /tmp/sglang-range.git && git clone -q /tmp/sglang-range.git /tmp/sglang || return 1
    mkdir -p /tmp/pbreal && touch /tmp/pbreal/setup.ok
  fi
  export PYTHONPATH=$repo:/tmp/site
  # HolisticTraceAnalysis (the explain extra) parses the traces: its wheel alone (.gpu/explain;
  # its parser needs only pandas, numpy, psutil and yaml, which the image has)
  if compgen -G "$repo/.gpu/explain/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site "$repo"/.gpu/explain/*.whl && echo "installed: $(ls $repo/.gpu/explain)"
  fi
  python3 -c "from hta.common.trace_parser import parse_trace_dataframe; import pandas; print('HTA parser imports, pandas', pandas.__version__)" \
    || echo "HTA not importable: the JSON reader reads the traces"
  if [ ! -f /tmp/models/dsv3-8l/config.json ]; then
    python3 "$repo/docs/examples/sglang_gpu/make_dsv3_proxy_model.py" /tmp/models || return 1
    python3 - <<'PY' || return 1
import json, pathlib
src, dst = pathlib.Path("/tmp/models/dsv3"), pathlib.Path("/tmp/models/dsv3-8l")
c = json.loads((src / "config.json").read_text())
c.update(num_hidden_layers=8, n_routed_experts=16)  # the proxy of ../sglang_gpu/dsv3_proxy.toml
dst.mkdir(exist_ok=True)
(dst / "config.json").write_text(json.dumps(c, indent=1))
for f in src.iterdir():
    if f.name != "config.json":
        (dst / f.name).write_bytes(f.read_bytes())
print("proxy model", dst, "layers 8, experts 16")
PY
  fi
  git -C /tmp/sglang cat-file -e $COMMIT^{commit} && echo "sglang source: $COMMIT in /tmp/sglang"
  python3 -c "import perfbisect, torch; print('perfbisect', perfbisect.__file__, 'torch', torch.__version__, 'gpus', torch.cuda.device_count())"
}

# perfbisect until the deadline less a margin: SIGINT (its clean stop: servers torn down, the
# launch recorded) if it is still running then. A script's background job ignores SIGINT, so
# Python gets its handler back first.
pb_until() {
  local margin=$1; shift
  local limit=$(( $(left) - margin )); (( limit < 20 )) && { echo "[skipped: ${limit}s left]" >&2; return 1; }
  timeout -s INT -k 25 $limit python3 -c 'import runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.argv = ["perfbisect", *sys.argv[1:]]
runpy.run_module("perfbisect", run_name="__main__")' "$@"
}

# One explanation: its JSON kept, its text view in the summary.
explain() {
  local name=$1 need=$2 dir=$3; shift 3
  if (( $(left) < need )); then say "== $name: skipped, $(left)s left (needs ~${need}s)"; return; fi
  say "== $name ($(left)s left): perfbisect bisect explain $*"
  local t0=$SECONDS
  (cd "$dir" && pb_until 20 bisect explain "$@" --json > "$res/json/$name.json" 2> "$res/json/$name.stderr")
  local rc=$?
  say "exit code $rc after $((SECONDS - t0))s"
  tail -3 "$res/json/$name.stderr" | tee -a "$summary"
  if [ -s "$res/json/$name.json" ]; then
    python3 - "$res/json/$name.json" <<'PY' 2>&1 | tee -a "$summary"
import json, sys
from perfbisect.cli.render_explain import render_why
render_why(json.load(open(sys.argv[1])))
PY
    python3 - "$res/json/$name.json" "$res/traces" "$name" <<'PY'
import gzip, json, os, shutil, sys
why = json.load(open(sys.argv[1]))
for side in ("good", "bad"):  # one trace a side travels back (Perfetto opens them)
    for t in why[side]["traces"][:1]:
        out = f"{sys.argv[2]}/{sys.argv[3]}.{side}.json.gz"
        with open(t, "rb") as src, gzip.open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
        if os.path.getsize(out) > 5 * 2**20:  # 16 MiB a file comes back, 64 in all
            os.remove(out)
            print(f"trace {t}: over 5 MiB gzipped, not brought back")
PY
  fi
}

step_nccl() {
  say "== nccl ($(left)s left): one-rank communicators, NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING"
  if [ "$DEVICE" != cuda ]; then say "skipped: no GPU"; return; fi
  local d=$res/nccl
  export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING
  NCCL_DEBUG_FILE=$d/nccl.env.%h.%p NCCL_PROTO=LL NCCL_ALGO=Ring NCCL_MAX_NCHANNELS=4 \
    timeout 90 python3 "$here/nccl_capture.py" env $d 2>&1 | tee -a "$summary"
  NCCL_DEBUG_FILE=$d/nccl.late.%h.%p timeout 90 python3 "$here/nccl_capture.py" late $d 2>&1 | tee -a "$summary"
  NCCL_PROTO=LL NCCL_ALGO=Ring NCCL_MAX_NCHANNELS=4 NCCL_DEBUG_FILE=$d/nccl.stripped.%h.%p \
    timeout 90 env -u NCCL_PROTO -u NCCL_ALGO -u NCCL_MAX_NCHANNELS python3 "$here/nccl_capture.py" stripped $d 2>&1 | tee -a "$summary"
  unset NCCL_DEBUG NCCL_DEBUG_SUBSYS
  for f in $d/nccl.*; do
    say "-- $(basename $f): $(wc -l < $f) lines; parsed:"
    python3 - "$f" <<'PY' 2>&1 | tee -a "$summary"
import sys
from perfbisect.explain.nccl_log import parse
for p in parse(open(sys.argv[1]).read().splitlines()):
    print(f"   pid {p.pid} NCCL {p.version} taken {dict(p.taken)} comms "
          f"{[(c.rank, c.nranks, c.tid) for c in p.communicators]} tuning {list(p.tuning)[:4]}")
PY
  done
}

ref_experiment() {  # $1: folder; a git repository of the packaged reference server + the toml
  local d=$1
  mkdir -p $d && git init -q -b main $d/repo || return 1
  python3 -c 'from perfbisect.targets.reference.target import SERVER; print(SERVER)' | xargs -I{} cp {} $d/repo/server.py
  git -C $d/repo add server.py && git -C $d/repo -c user.email=e@x -c user.name=x commit -qm "reference server"
  cat > $d/perfbisect.toml <<TOML
[target]
kind = "reference"
repo = "repo"
tp = 1
device = "$DEVICE"
layers = 8
hidden = 1024
heads = 16
max_seq = 640
prompt = 256
cycles = 30
warmup = 3
timeout_s = 180
# a one-rank NCCL group (the verify's all-reduces on it); {late} only in reflate's axis
server_args = ["--group", "always", "--late-env", "{late}"]

[axes.custom.late]
values = ["none", "NCCL_MAX_NCHANNELS:4"]  # NAME:VALUE (no "=" in axis values)
ordered = false

[explain]
launches = 1
cycles = 8
skip = 5
TOML
  git -C $d/repo rev-parse HEAD
}

step_refnccl() {
  command -v tmux >/dev/null || { say "== refnccl: skipped, no tmux on this machine"; return; }
  local d=$work/ref sha
  sha=$(ref_experiment $d) || return
  # The tmux server's global environment is what its new sessions inherit: started with the
  # tuning variables, it hands them to every later tmux launch (the bad side) and not to a
  # direct launch (the good side).
  export TMUX_TMPDIR=$work/tmux && mkdir -p $TMUX_TMPDIR
  env NCCL_MAX_NCHANNELS=4 NCCL_PROTO=Simple NCCL_ALGO=Ring tmux new-session -d -s keeper || { say "tmux failed"; return; }
  explain refnccl 80 $d --good "commit=$sha,launch=direct,late=none" --bad "commit=$sha,launch=tmux,late=none"
  tmux kill-server 2>/dev/null
}

step_reflate() {
  local d=$work/reflate sha
  sha=$(ref_experiment $d) || return
  explain reflate 70 $d --good "commit=$sha,late=none" --bad "commit=$sha,late=NCCL_MAX_NCHANNELS:4"
}

sglang_dir() {  # $1: toml; the experiment folder with the patches beside it
  local d=$work/$(basename $1 .toml)
  mkdir -p $d && cp "$here/$1" $d/perfbisect.toml && rm -rf $d/patches && cp -r "$here/patches" $d/ && echo $d
}

step_eager() {
  local d; d=$(sglang_dir sglang_stack.toml)
  explain eager 170 $d --good "$COMMIT,patches=none" --bad "$COMMIT,patches=04-verify-out-of-graphs.patch"
}
step_sync() {
  local d; d=$(sglang_dir sglang_stack.toml)
  explain sync 120 $d --good "$COMMIT,patches=none" --bad "$COMMIT,patches=05-verify-host-sync.patch"
}
step_dsv3() {
  local d; d=$(sglang_dir dsv3_graph_bs.toml)
  explain dsv3 160 $d --good "$COMMIT,graph_bs=covers" --bad "$COMMIT,graph_bs=below"
}

{ setup && echo "setup done at ${SECONDS}s"; } > "$OUT/setup.txt" 2>&1 || { cat "$OUT/setup.txt"; exit 1; }
cat "$OUT/setup.txt"
cd "$repo" || exit 1
for step in $STEPS; do "step_$step"; cd "$repo"; done
say "== done at ${SECONDS}s ($(left)s left)"
python3 -m perfbisect query history --json > "$res/json/history.json" 2>&1
tar -czf "$OUT/nccl.tgz" -C $res nccl
tar -czf "$OUT/explain_json.tgz" -C $res json
tar -czf "$OUT/traces.tgz" -C $res traces
# every launch's logs but the traces (one a side is in traces.tgz): serve/measure logs, NCCL's
# own files, the rank processes' records
tar -czf "$OUT/logs.tgz" --exclude='trace.rank*.json' -C $PERFBISECT_CACHE logs 2>/dev/null
ls -la "$OUT"
