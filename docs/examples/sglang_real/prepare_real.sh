#!/usr/bin/env bash
# Here (a machine with PyPI and a git history of sgl-project/sglang main up to BAD): everything
# gpu_real.sh needs, in the repository root's ignored folders, in two device calls' worth:
#   .gpu/p1/wheels.part00                                  (50 MiB; call 1)
#   .gpu/p2/wheels.part01 sglang-range.git.tar SHA256SUMS  (40 MiB; call 2, with .whl)
#   .whl/  perfbisect's wheel and the dependencies the GPU image lacks (13 MiB)
# Usage: prepare_real.sh SGLANG_GIT_DIR   (a clone or fork of sgl-project/sglang; the session
#        used the fork bytedance-iaas/sglang, whose main carries upstream's commits unchanged)
#
# The wheels: SGLang 0.5.12's set (../sglang_gpu/prepare_wheels.sh) less SGLang's own wheel (the
# checkouts run from source), nvidia-cudnn-frontend (flashinfer imports it under try/except)
# and jedi/parso (IPython imports jedi lazily): 53 wheels, 69 MiB.
# The range repository: a bare repository holding main's 161 first-parent commits GOOD..BAD with
# upstream's own hashes, shallow at GOOD (its parent is not there), tagged range-good/range-bad.
set -euo pipefail
src=${1:?usage: prepare_real.sh SGLANG_GIT_DIR}
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../../.." && pwd)
GOOD=0c19540550e1c488b6a6675b4909737d8f274fe2
BAD=314dedf7c6ecb19561499f965d4af84d4383b154
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
src=$(cd "$src" && git rev-parse --absolute-git-dir)

SKIP_NCCL=1 bash "$here/../sglang_gpu/prepare_wheels.sh" "$tmp/w" >/dev/null
mkdir -p "$tmp/stage/wheels"
for f in "$tmp"/w/wheels/*.whl; do
  case $(basename "$f") in
    sglang-0.5.12-*|nvidia_cudnn_frontend-*|jedi-*|parso-*) ;;
    *) cp "$f" "$tmp/stage/wheels/" ;;
  esac
done

depth=$(($(git -C "$src" rev-list --count "$GOOD..$BAD") + 1))
[ "$(git -C "$src" rev-list --count --merges "$GOOD..$BAD")" = 0 ] || { echo "merges in range"; exit 1; }
git init -q --bare "$tmp/sglrange.git"
git -C "$tmp/sglrange.git" symbolic-ref HEAD refs/heads/main
git -C "$tmp/sglrange.git" fetch -q --depth="$depth" "file://$src" "$BAD:refs/heads/main"
[ "$(cat "$tmp/sglrange.git/shallow")" = "$GOOD" ] || { echo "shallow boundary is not GOOD"; exit 1; }
git -C "$tmp/sglrange.git" tag -a -m "upstream sglang #25335: the first commit with v0.5.12's pins" range-good "$GOOD"
git -C "$tmp/sglrange.git" tag -a -m "upstream sglang #25686: the last commit before #25690 re-pins flashinfer" range-bad "$BAD"
git -C "$tmp/sglrange.git" gc -q --aggressive

cd "$tmp/stage"
tar -cf wheels.tar wheels && tar -cf sglang-range.git.tar -C "$tmp" sglrange.git
split -b 50M -d wheels.tar wheels.part
sha256sum wheels.tar sglang-range.git.tar > SHA256SUMS
rm -rf "$root/.gpu/p1" "$root/.gpu/p2" && mkdir -p "$root/.gpu/p1" "$root/.gpu/p2"
mv wheels.part00 "$root/.gpu/p1/" && mv wheels.part01 sglang-range.git.tar SHA256SUMS "$root/.gpu/p2/"

# perfbisect's dependencies that the image lacks (KINDS.md), at the versions tested here
rm -rf "$root/.whl" && mkdir -p "$root/.whl"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_24_x86_64 -d "$root/.whl" \
  sqlalchemy==2.1.9 greenlet==3.5.6 alembic==1.20.1 mako==1.4.3 gitpython==3.2.1 gitdb==4.0.12 \
  smmap==5.0.3 fabric==3.2.3 invoke==2.2.1 paramiko==5.1.0 bcrypt==5.0.0 pynacl==1.6.2 \
  cryptography==50.0.2 decorator==5.3.1 deprecated==1.3.1 platformdirs==4.14.9
python3 -m pip wheel -q --no-deps --no-build-isolation -w "$root/.whl" "$root"
cat "$root/.gpu/p2/SHA256SUMS"; du -sh "$root/.gpu/p1" "$root/.gpu/p2" "$root/.whl"
