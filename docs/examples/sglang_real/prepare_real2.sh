#!/usr/bin/env bash
# Here (a machine with PyPI and a git history of sgl-project/sglang main up to BAD): what run 2
# (range2.md, real2.toml) needs on top of run 1's parts (prepare_real.sh: .gpu/p1, .gpu/p2, .whl),
# in parts that a call (64 MiB with the working tree) can carry in whole folders:
#   OUT/r1/  transformers-5.8.1                                                 (10.1 MiB)
#   OUT/r2/  flashinfer_python-0.6.12                                           (13.3 MiB)
#   OUT/r3/  sglang_kernel-0.4.3 (cut), sglang-range2.git.tar, SHA256SUMS.range2 (50.7 MiB)
#   OUT/b1/, OUT/b2/  run 1's parts of SGLang 0.5.12's wheel set, copied from the checkout's
#            ../p1 and ../p2 beside OUT (prepare_real.sh) without what run 2 does not need there (an
#            extra wheel in p1, run 1's range in p2): wheels.part00 | wheels.part01, SHA256SUMS
# Usage: prepare_real2.sh SGLANG_GIT_DIR [OUT]   (OUT defaults to the checkout's .gpu/range, which
#        .gitignore's /.gpu/ keeps out of git)
#
# The range repository: a bare repository holding main's 130 first-parent commits GOOD..BAD with
# upstream's own hashes, shallow at GOOD, tagged range2-good / range2-change / range2-bad.
set -euo pipefail
src=${1:?usage: prepare_real2.sh SGLANG_GIT_DIR [OUT]}
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../../.." && pwd)
out=${2:-$root/.gpu/range}
GOOD=e7f94d0d403a48e3b800c40ebb7debf7d54c16f5    # #26444, CUDA 13 JIT activation fix
CHANGE=28c1a3cb450f78028f01c3255cb61c047adf21d3  # #25464, Deprecate Spec V1
BAD=3fe6bc390bdcfc45873e796f5c1351f2001a91ae     # #27599, six commits after it
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
src=$(cd "$src" && git rev-parse --absolute-git-dir)

# The pins every commit of the range declares, read back from the two ends (a moved pin fails here)
for sha in $GOOD $BAD; do
  pins=$(git -C "$src" show "$sha:python/pyproject.toml" \
    | grep -oE '"(torch|sglang-kernel|flashinfer_python(\[cu13\])?|transformers)==[^"]*"' | tr -d '"' | sort | tr '\n' ' ')
  [ "$pins" = "flashinfer_python[cu13]==0.6.12 sglang-kernel==0.4.3 torch==2.11.0 transformers==5.8.1 " ] \
    || { echo "pins at $sha are not the range's: $pins"; exit 1; }
done

plat=()
for p in manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_24_x86_64 manylinux_2_27_x86_64 \
         manylinux_2_28_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64; do plat+=(--platform "$p"); done
mkdir -p "$tmp/full" "$tmp/r1" "$tmp/r2" "$tmp/r3"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${plat[@]}" -d "$tmp/full" sglang-kernel==0.4.3 flashinfer-python==0.6.12 transformers==5.8.1
mv "$tmp"/full/transformers-5.8.1-*.whl "$tmp/r1/" && mv "$tmp"/full/flashinfer_python-0.6.12-*.whl "$tmp/r2/"
# sglang-kernel cut to what an H200 loads, as ../sglang_gpu/prepare_wheels.sh cuts 0.4.2.post2:
# FA3's flash_ops (1 GiB unpacked, only the fa3 backend loads it) and the sm100 build dropped.
python3 - "$tmp/full" "$tmp/r3" <<'PY'
import sys, zipfile
from pathlib import Path
drop = lambda n: (n == "sgl_kernel/flash_ops.abi3.so" or n.startswith("sgl_kernel/sm100/")
                  or n.endswith(".a") or n.startswith("include/"))
for whl in Path(sys.argv[1]).glob("sglang_kernel-*.whl"):
    with zipfile.ZipFile(whl) as zin, zipfile.ZipFile(Path(sys.argv[2]) / whl.name, "w",
                                                      zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for info in zin.infolist():
            if drop(info.filename):
                continue
            data = zin.read(info.filename)
            if info.filename.endswith("/RECORD"):
                rows = [r for r in data.decode().splitlines() if not drop(r.split(",")[0])]
                data = ("\n".join(rows) + "\n").encode()
            z.writestr(info, data)
PY

depth=$(($(git -C "$src" rev-list --count "$GOOD..$BAD") + 1))
[ "$(git -C "$src" rev-list --count --merges "$GOOD..$BAD")" = 0 ] || { echo "merges in range"; exit 1; }
git -C "$src" merge-base --is-ancestor "$CHANGE" "$BAD" || { echo "#25464 not in range"; exit 1; }
git init -q --bare "$tmp/sglrange2.git"
git -C "$tmp/sglrange2.git" symbolic-ref HEAD refs/heads/main
git -C "$tmp/sglrange2.git" fetch -q --depth="$depth" "file://$src" "$BAD:refs/heads/main"
[ "$(cat "$tmp/sglrange2.git/shallow")" = "$GOOD" ] || { echo "shallow boundary is not GOOD"; exit 1; }
git -C "$tmp/sglrange2.git" tag -a -m "upstream sglang #26444: JIT activation compiles with CUDA 13 again" range2-good "$GOOD"
git -C "$tmp/sglrange2.git" tag -a -m "upstream sglang #25464: Deprecate Spec V1 (the V2 worker without overlap)" range2-change "$CHANGE"
git -C "$tmp/sglrange2.git" tag -a -m "upstream sglang #27599: six commits after #25464" range2-bad "$BAD"
git -C "$tmp/sglrange2.git" gc -q --aggressive
tar -cf "$tmp/r3/sglang-range2.git.tar" -C "$tmp" sglrange2.git
(cd "$tmp" && sha256sum r1/*.whl r2/*.whl r3/*.whl r3/sglang-range2.git.tar \
  | sed 's# r[123]/# #' > r3/SHA256SUMS.range2)

rm -rf "$out/r1" "$out/r2" "$out/r3" "$out/b1" "$out/b2" && mkdir -p "$out/b1" "$out/b2"
mv "$tmp/r1" "$tmp/r2" "$tmp/r3" "$out/"
gpu=$(dirname "$out")  # .gpu, where prepare_real.sh left p1 and p2
cp "$gpu/p1/wheels.part00" "$out/b1/" && cp "$gpu/p2/wheels.part01" "$gpu/p2/SHA256SUMS" "$out/b2/"
sum=$(cat "$out/b1/wheels.part00" "$out/b2/wheels.part01" | sha256sum | cut -d' ' -f1)
grep -q "^$sum  wheels.tar$" "$out/b2/SHA256SUMS" || { echo "run 1's parts do not make its wheels.tar"; exit 1; }
cat "$out/r3/SHA256SUMS.range2"; du -sh "$out"/*
