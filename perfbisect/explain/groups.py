"""Which group a kernel or operator belongs to, and what an NCCL kernel's name says.

Groups follow what an engineer reads a verify profile for: GEMM, attention, MoE, all-reduce
(NCCL, SGLang's custom all-reduce, gloo), elementwise, memcpy, synchronisation. On CPU the
"kernels" are PyTorch's CPU operators (``aten::mm``); on GPU the CUDA kernels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GROUPS = ("GEMM", "attention", "MoE", "all-reduce", "memcpy", "synchronisation", "elementwise")
HOST_GAP = "host gaps"

# First match wins: all-reduce before GEMM (NCCL's names hold "Sum"), MoE before GEMM
# (fused MoE kernels are GEMMs of experts).
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "all-reduce",
        re.compile(
            r"nccl|all_?reduce|allreduce|cross_device_reduce|c10d::|gloo|reduce_scatter|"
            r"all_?gather",
            re.I,
        ),
    ),
    ("MoE", re.compile(r"moe|expert|topk_softmax|grouped_topk", re.I)),
    (
        "attention",
        re.compile(r"attn|attention|flash|fmha|mha|sdpa|scaled_dot_product|softmax|einsum", re.I),
    ),
    (
        "GEMM",
        re.compile(
            r"gemm|cublas|cutlass|xmma|aten::(mm|bmm|addmm|matmul|linear|baddbmm)$|sm\d+_.*(nn|tn|nt)",
            re.I,
        ),
    ),
    (
        "synchronisation",
        re.compile(
            r"synchronize|_local_scalar_dense|aten::item|cudaStreamWaitEvent|cudaEventSynchronize",
            re.I,
        ),
    ),
    ("memcpy", re.compile(r"memcpy|memset|copy_|_to_copy|aten::to$|index_copy|clone", re.I)),
)


def group_of(name: str) -> str:
    for group, pattern in _RULES:
        if pattern.search(name):
            return group
    return "elementwise"


@dataclass(frozen=True)
class NcclKernel:
    operation: str  # AllReduce, AllGather, SendRecv, ...
    algorithm: str | None  # RING, TREE, NVLS, COLLNET_DIRECT, ...
    protocol: str | None  # LL, LL128, SIMPLE


# ncclDevKernel_AllReduce_Sum_bf16_RING_LL(...), ncclKernel_AllReduce_RING_LL_Sum_float(...)
_NCCL_DEV = re.compile(
    r"nccl(?:Dev)?Kernel_(?P<op>[A-Za-z]+)(?:_[A-Za-z0-9]+)*?"
    r"_(?P<algo>RING|TREE|NVLS_TREE|NVLS|COLLNET_DIRECT|COLLNET_CHAIN|PAT)_(?P<proto>LL128|LL|SIMPLE)"
)
_NCCL_ANY = re.compile(r"nccl(?:Dev)?Kernel_(?P<op>[A-Za-z]+)")


def nccl_kernel(name: str) -> NcclKernel | None:
    """Operation, algorithm and protocol from an NCCL kernel's name (None: not NCCL's)."""
    match = _NCCL_DEV.search(name)
    if match:
        return NcclKernel(match.group("op"), match.group("algo"), match.group("proto"))
    match = _NCCL_ANY.search(name)
    return NcclKernel(match.group("op"), None, None) if match else None
