"""Torch stand-ins for vLLM's compiled ops on the converted MoE path (GPU harness only).

vLLM's compiled extensions (``_C``, ``_moe_C``: 155 MB) do not travel to the borrowed
GPU machine, so the harness installs these in their place. Only ops that are missing
are installed (``install`` never shadows a compiled op), and only in the harness
process: nothing here is part of the image.

* ``_C.silu_and_mul_with_clamp`` (SwiGLU-OAI step of ``TritonExperts``): fp32 math,
  result in the output's dtype, as the CUDA/HIP kernel.
* ``_moe_C.moe_sum`` (top-k reduction at the end of ``TritonExperts.apply``): fp32 sum.
* ``_moe_C.moe_align_block_size`` (token -> expert block layout for the Triton GEMMs).
* ``_C.per_token_group_fp8_quant`` (1x128 activation quant): forwards to vLLM's own
  Triton fallback kernel ``_per_token_group_quant_fp8`` (on a GPU), or a torch
  version of its rule (CPU dry run).
* ``_C.cutlass_*supported`` capability probes, which vLLM calls at import time on
  CUDA: False (no CUTLASS kernels here; none is on this path).
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import torch


class _Unavailable(types.ModuleType):
    """A compiled vLLM module that did not travel: importable, every name a stub that
    raises if it is ever called (nothing on the MoE path calls them)."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)

        def unavailable(*args, **kwargs):
            raise NotImplementedError(f"{self.__name__}.{name} is not available in the GPU harness")

        return unavailable


# imported at module level on CUDA by modules the MoE path imports (platforms/cuda.py,
# v1/attention/backends/fa_utils.py via quantization/modelopt.py)
COMPILED_MODULES = ("vllm._C_stable_libtorch", "vllm.vllm_flash_attn")


def stub_compiled_modules(site: Path) -> list[str]:
    """Register stand-ins for the compiled modules missing from the tree at ``site``."""
    done = []
    for name in COMPILED_MODULES:
        rel = Path(*name.split("."))
        if list((site / rel.parent).glob(rel.name + "*.so")):
            continue
        sys.modules[name] = _Unavailable(name)
        done.append(name)
    return done


def silu_and_mul_with_clamp(
    out: torch.Tensor, x: torch.Tensor, limit: float, alpha: float, beta: float
) -> None:
    d = x.shape[-1] // 2
    gate = x[..., :d].float().clamp(max=limit)
    up = x[..., d:].float().clamp(-limit, limit)
    out.copy_((gate * torch.sigmoid(alpha * gate) * (up + beta)).to(out.dtype))


def moe_sum(inp: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(inp.float().sum(1).to(out.dtype))


def moe_align_block_size(
    topk_ids, num_experts, block_size, sorted_ids, expert_ids, num_tokens_post_pad, expert_map=None
) -> None:
    flat = topk_ids.reshape(-1).to(torch.int64)
    if expert_map is not None:  # ignore_invalid_experts: only local experts count
        flat = torch.where(flat >= 0, expert_map[flat.clamp_min(0)], -1)
    numel = topk_ids.numel()
    sorted_ids.fill_(numel)
    expert_ids.fill_(0)
    counts = torch.bincount(flat[flat >= 0], minlength=num_experts).tolist()
    order = torch.argsort(flat, stable=True)
    src, pos = int((flat < 0).sum()), 0  # invalid (-1) entries sort first
    for e, c in enumerate(counts):
        if c == 0:
            continue
        sorted_ids[pos : pos + c] = order[src : src + c].to(sorted_ids.dtype)
        padded = -(-c // block_size) * block_size
        expert_ids[pos // block_size : (pos + padded) // block_size] = e
        pos += padded
        src += c
    num_tokens_post_pad.fill_(pos)


def per_token_group_fp8_quant_triton(
    x,
    x_q,
    x_s,
    group_size,
    eps,
    fp8_min,
    fp8_max,
    use_ue8m0,
    column_major_scales,
    tma_aligned_scales,
) -> None:
    """vLLM's Triton fallback of ``per_token_group_quant_fp8`` (row-major scales)."""
    from vllm.model_executor.layers.quantization.utils import fp8_utils
    from vllm.triton_utils import triton

    assert not column_major_scales, "column-major scales are not on this path"
    M = x.numel() // group_size
    BLOCK = triton.next_power_of_2(group_size)
    fp8_utils._per_token_group_quant_fp8[(M,)](
        x,
        x_q,
        x_s,
        group_size,
        x.shape[1],
        x.stride(0),
        eps,
        fp8_min=fp8_min,
        fp8_max=fp8_max,
        use_ue8m0=use_ue8m0,
        BLOCK=BLOCK,
        num_warps=min(max(BLOCK // 256, 1), 8),
        num_stages=1,
    )


def per_token_group_fp8_quant_torch(
    x,
    x_q,
    x_s,
    group_size,
    eps,
    fp8_min,
    fp8_max,
    use_ue8m0,
    column_major_scales,
    tma_aligned_scales,
) -> None:
    """The same rule in torch (CPU dry run): s = max(amax, eps) / fp8_max."""
    xg = x.float().reshape(*x.shape[:-1], -1, group_size)
    s = xg.abs().amax(-1).clamp_min(eps) / fp8_max
    if use_ue8m0:
        s = torch.exp2(torch.ceil(torch.log2(s)))
    x_q.copy_((xg / s.unsqueeze(-1)).clamp(fp8_min, fp8_max).reshape(x.shape).to(x_q.dtype))
    x_s.copy_(s.reshape(x_s.shape))


def _unsupported(capability: int) -> bool:
    """vLLM's import-time capability probes for its CUTLASS kernels: none here."""
    return False


def _missing(namespace: str, name: str) -> bool:
    try:
        getattr(getattr(torch.ops, namespace), name)
        return False
    except (AttributeError, RuntimeError):
        return True


def install(*, triton_quant: bool) -> list[str]:
    """Install the stand-ins for the ops that are missing; returns their names."""
    ops = {
        ("_C", "silu_and_mul_with_clamp"): silu_and_mul_with_clamp,
        ("_moe_C", "moe_sum"): moe_sum,
        ("_moe_C", "moe_align_block_size"): moe_align_block_size,
        ("_C", "per_token_group_fp8_quant"): (
            per_token_group_fp8_quant_triton if triton_quant else per_token_group_fp8_quant_torch
        ),
        # called at import time on CUDA (quantization/utils/w8a8_utils.py)
        ("_C", "cutlass_scaled_mm_supports_fp8"): _unsupported,
        ("_C", "cutlass_scaled_mm_supports_block_fp8"): _unsupported,
        ("_C", "cutlass_group_gemm_supported"): _unsupported,
    }
    done = []
    for (ns, name), fn in ops.items():
        if _missing(ns, name):
            setattr(getattr(torch.ops, ns), name, fn)
            done.append(f"{ns}.{name}")
    return done
