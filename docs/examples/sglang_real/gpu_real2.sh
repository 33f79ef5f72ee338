#!/bin/bash
# Issue 31, run 2 on the H200 machine (range2.md, real2.toml): gpu_real.sh's steps (stash, go,
# resume) for the range e7f94d0d40..3fe6bc390b, with its own state (/tmp/pbreal2), its clone
# (/tmp/sglang2) and its environment: /tmp/pbreal2/py, layered on python3 (which keeps SGLang
# 0.5.12's wheel set for the session's other runs) with the range's three pinned wheels.
# Parts, as prepare_real2.sh leaves them (each call's carry is stashed):
#   .gpu/range/b1 (wheels.part00), .gpu/range/b2 (wheels.part01, SHA256SUMS) -> /tmp/parts: run 1's
#       parts of SGLang 0.5.12's wheel set (copied from .gpu/p1, .gpu/p2) for python3, with .whl
#       (perfbisect's dependencies, read in place) -- not needed where run 1 or
#       ../explain_gpu/run_sglang.sh set this machine up (/tmp/pbreal/setup.ok)
#   .gpu/range/r1 (transformers 5.8.1), .gpu/range/r2 (flashinfer 0.6.12),
#   .gpu/range/r3 (sglang-kernel 0.4.3, the range's repository, SHA256SUMS.range2) -> /tmp/parts2
# The calls (README.md, "Run 2"): stash, stash, go; then resume N. A fresh machine after a lost
# one: the same calls with `resume` in place of `go`, carrying .gpu/range/state (the last
# pb.sqlite) in the last one too.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export GOOD=e7f94d0d403a48e3b800c40ebb7debf7d54c16f5  # #26444: JIT activation compiles with CUDA 13
export BAD=3fe6bc390bdcfc45873e796f5c1351f2001a91ae   # #27599, six commits after #25464
export EXP=$here/real2.toml STATE=/tmp/pbreal2 RANGE_DIR=/tmp/sglang2
export RANGE_TAR=/tmp/parts2/sglang-range2.git.tar SMOKE_PY=/tmp/pbreal2/py/bin/python
export STATE_CARRY=.gpu/range/state
ENV_DIR=/tmp/pbreal2/py  # real2.toml's [target] python is $ENV_DIR/bin/python

mkdir -p /tmp/parts /tmp/parts2
for d in .gpu/range/b1 .gpu/range/b2; do [ -d $d ] && cp $d/* /tmp/parts/; done
for d in .gpu/range/r1 .gpu/range/r2 .gpu/range/r3; do [ -d $d ] && cp $d/* /tmp/parts2/; done

# shellcheck source=gpu_real.sh
source "$here/gpu_real.sh"

# The range's environment: perfbisect's own layered venv (targets/pyenv.py) on python3, the three
# wheels installed into it without their dependencies (python3 has them: 0.5.12's set), so
# perfbisect finds every pin met and runs no pip; python3 itself is left as it was.
setup_hook() {
  (cd /tmp/parts2 && sha256sum -c SHA256SUMS.range2) || return 1
  rm -rf "$ENV_DIR"
  eval "$(python3 -c 'import sys; from perfbisect.targets.pyenv import layered_venv_shell
print(layered_venv_shell("python3", sys.argv[1]))' "$ENV_DIR")" >/dev/null || return 1
  "$ENV_DIR/bin/python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    /tmp/parts2/*.whl || return 1
  local probe='import importlib.metadata as m, sys
def v(n):
    try:
        return m.version(n)
    except m.PackageNotFoundError:
        return "absent"
print(sys.executable, *("%s %s" % (n, v(n)) for n in ("torch", "sglang-kernel", "flashinfer-python", "transformers")))'
  "$ENV_DIR/bin/python" -c "$probe" && python3 -c "$probe"
}

if [ "$1" = stash ]; then ls -la /tmp/parts2; fi
main "$@"
