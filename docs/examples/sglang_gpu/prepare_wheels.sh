#!/usr/bin/env bash
# Here (a machine with PyPI): the wheels SGLang 0.5.12 needs on the H200 machine beyond what its
# image has (KINDS.md's package list), for Python 3.12 / manylinux x86_64, packed into parts of
# at most 61 MiB (one device transfer each). Also one NCCL library (NCCL_VERSION, default 2.29.7),
# from its nvidia-nccl-cu13 wheel, for the nccl axis run. 2.27.7 was tried first: torch 2.11's
# libtorch_cuda.so needs ncclDevCommDestroy, which NCCL before 2.28 lacks (docs/examples/gpu).
# Usage: prepare_wheels.sh OUT_DIR
#
# The set was found by resolving sglang==0.5.12's requirements against the image's packages and
# then importing SGLang's server modules: transformers 5.6.0 needs tokenizers <= 0.23.0 (the image
# has 0.23.2); openai, dill, compressed-tensors, gguf, soundfile, jsonschema and IPython (from
# sglang/utils.py) are imported at start-up without being declared (or declared elsewhere). Left out on
# purpose: flashinfer-cubin (345 MiB; the run uses --attention-backend triton and
# --sampling-backend pytorch), xgrammar/outlines/llguidance (--grammar-backend none), tilelang,
# flash-attn-4, deep-gemm, torchao, multimodal and grpc packages (not imported for a Llama model).
# sglang-kernel is cut to what an H200 loads: FA3's flash_ops (1 GiB unpacked, used only by the
# fa3 attention backend) and the sm100 build are dropped.
set -euo pipefail
out=${1:?usage: prepare_wheels.sh OUT_DIR}
mkdir -p "$out/wheels" "$out/full"
plat=()
for p in manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_24_x86_64 manylinux_2_27_x86_64 \
         manylinux_2_28_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64 manylinux1_x86_64 \
         manylinux_2_5_x86_64; do plat+=(--platform "$p"); done
wheels=(
  sglang==0.5.12 sglang-kernel==0.4.2.post2 flashinfer-python==0.6.11.post1 apache-tvm-ffi==0.1.9
  transformers==5.6.0 tokenizers==0.22.2 openai==2.6.1 jiter==0.19.0 distro==1.9.0 sniffio==1.3.1
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0 python-multipart==0.0.34 orjson==3.13.0
  msgspec==0.23.0 pyzmq==27.3.0 pybase64==1.5.1 setproctitle==1.3.8 watchfiles==1.3.0
  partial-json-parser==0.2.1.1.post7 interegular==0.3.3 easydict==1.14 cuda-python==13.4.4
  cuda-tile==1.7.0 nvidia-cudnn-frontend==1.32.0 torch-memory-saver==0.0.10
  opentelemetry-api==1.45.2 compressed-tensors==0.20.1 loguru==0.7.3 dill==0.4.1 gguf==0.19.0
  soundfile==0.13.1 cffi==2.1.1 pycparser==3.12 jsonschema==4.26.0 referencing==0.37.0
  jsonschema-specifications==2025.9.1 rpds-py==2026.9.1
  ipython==9.18.1 ipython-pygments-lexers==1.1.1 jedi==0.20.1 parso==0.8.7 matplotlib-inline==0.2.2
  pexpect==4.9.0 ptyprocess==0.7.0 prompt-toolkit==3.0.53 wcwidth==0.9.4 stack-data==0.6.3
  asttokens==3.0.2 executing==2.3.0 pure-eval==0.2.4 traitlets==5.16.1
)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp "${plat[@]}" -d "$out/full" "${wheels[@]}"
python3 - "$out" <<'PY'
import shutil, sys, zipfile
from pathlib import Path
out = Path(sys.argv[1])
drop = lambda n: (n == "sgl_kernel/flash_ops.abi3.so" or n.startswith("sgl_kernel/sm100/")
                  or n.endswith(".a") or n.startswith("include/"))
for whl in (out / "full").glob("*.whl"):
    if not whl.name.startswith("sglang_kernel-"):
        shutil.copy(whl, out / "wheels" / whl.name)
        continue
    with zipfile.ZipFile(whl) as zin, zipfile.ZipFile(out / "wheels" / whl.name, "w",
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
tar -cf "$out/sglang.tar" -C "$out" wheels
(cd "$out" && split -b 61M -d sglang.tar sglang.part && sha256sum sglang.tar > SHA256SUMS \
  && ls -la ./*.part* && du -sh wheels)
[ -n "${SKIP_NCCL:-}" ] && exit 0  # sglang_real/prepare_real.sh: the wheels alone
# The NCCL library alone, for CUDA 13 (perfbisect's own materialisation code).
nccl=${NCCL_VERSION:-2.29.7}
python3 -c "from perfbisect.targets.nccl import materialise; print(materialise('$nccl', 13))" \
  > "$out/nccl_path.txt"
mkdir -p "$out/nccl-$nccl" && cp "$(cat "$out/nccl_path.txt")" "$out/nccl-$nccl/libnccl.so.2"
tar -cf "$out/nccl.tar" -C "$out" "nccl-$nccl"
(cd "$out" && split -b 61M -d nccl.tar nccl.part && sha256sum sglang.tar nccl.tar > SHA256SUMS \
  && ls -la ./nccl.part*)
