"""The image's own ModelOpt MXFP8 MoE layer, driven the way vLLM drives it at serve time.

``build_layer`` creates ``ModelOptMxFp8FusedMoE`` (the MiniMax-M3 checkpoint's MoE
method) for a layer holding MXFP8 weights, with the SwiGLU-OAI parameters the
image's MiniMax-M3 model gives its ``FusedMoE`` (``MiniMaxM3TextConfig``), and runs
``process_weights_after_loading``: the patched load path converts the weights with
the image's conversion module (on the tensors' device: its Triton kernel on a GPU),
builds the quant config and the modular kernel (``TritonExperts``). ``run_layer``
calls ``method.apply`` as ``FusedMoE`` does for a routed batch.
"""

from __future__ import annotations

import contextlib
import types
from typing import Any

import torch

SWIGLU_KEYS = ("gemm1_alpha", "gemm1_beta", "gemm1_clamp_limit")
CONFIG_MODULE = "vllm.transformers_utils.configs.minimax_m3"


def image_swiglu() -> dict:
    """SwiGLU-OAI parameters of the image's MiniMax-M3 model config (its defaults mirror
    the checkpoint's text_config); the model passes them to its FusedMoE layer."""
    import importlib

    module = importlib.import_module(CONFIG_MODULE)
    # vLLM up to 0.33 defines MiniMaxM3TextConfig; 0.34 takes transformers' MiniMaxM3VLTextConfig
    # (imported into the same module), which has no swiglu_beta: 0.34's model fixes beta at 1.0.
    config_cls = getattr(module, "MiniMaxM3TextConfig", None) or module.MiniMaxM3VLTextConfig
    cfg = config_cls()
    return {
        "alpha": float(cfg.swiglu_alpha),
        "beta": float(getattr(cfg, "swiglu_beta", 1.0)),
        "limit": float(cfg.swiglu_limit),
    }


def _layer(w13, w13_scale, w2, w2_scale, swiglu: dict):
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    class _Layer(torch.nn.Module):
        def _expert_routing_tables(self):
            return None

    def p(t):
        return torch.nn.Parameter(t, requires_grad=False)

    E, N2, H = w13.shape
    layer: Any = _Layer()  # vLLM's layer attributes, set below
    layer.w13_weight, layer.w13_weight_scale = p(w13), p(w13_scale)
    layer.w2_weight, layer.w2_weight_scale = p(w2), p(w2_scale)
    layer.hidden_size = H
    layer.intermediate_size_per_partition = N2 // 2
    layer.num_experts = layer.global_num_experts = layer.local_num_experts = E
    layer.orig_dtype = layer.params_dtype = torch.bfloat16
    layer.swiglu_alpha, layer.swiglu_beta, layer.swiglu_limit = (
        swiglu["alpha"],
        swiglu["beta"],
        swiglu["limit"],
    )
    layer.expert_map = None
    layer.activation = MoEActivation.SWIGLUOAI_UNINTERLEAVE
    layer.apply_router_weight_on_input = False
    return layer


def build_layer(
    w13, w13_scale, w2, w2_scale, *, swiglu: dict, select_ctx=None, capture_kernel: bool = False
):
    """Create the ModelOpt MXFP8 MoE method + layer and run its load path.

    ``select_ctx``: a context manager active while the method picks its backend
    (the platform mock on CPU; None on the real device). ``capture_kernel``: replace
    only ``make_fp8_moe_kernel`` (to record its arguments) where the kernel cannot be
    built. Returns (method, layer, captured kwargs, vLLM log lines).
    """
    from unittest import mock

    import vllm.model_executor.layers.quantization.modelopt as mo

    from m3_smoke.vllm_env import captured_vllm_log, moe_config

    E, N2, H = w13.shape
    captured: dict = {}
    real_make = mo.make_fp8_moe_kernel

    def _make(**kwargs):
        captured.update(kwargs)
        if capture_kernel:
            # vLLM 0.34 calls moe_kernel.fused_experts.keep_constants(layer) after building it
            keep = types.SimpleNamespace(keep_constants=lambda layer: None)
            return types.SimpleNamespace(name="captured-by-m3_smoke", fused_experts=keep)
        return real_make(**kwargs)

    with captured_vllm_log() as log, mock.patch.object(mo, "make_fp8_moe_kernel", _make):
        cfg = moe_config(
            num_experts=E, hidden=H, intermediate=N2 // 2, swiglu=swiglu, device=str(w13.device)
        )
        qc = types.SimpleNamespace(is_checkpoint_mxfp8_serialized=True)
        with select_ctx if select_ctx is not None else contextlib.nullcontext():
            method = mo.ModelOptMxFp8FusedMoE(qc, cfg)
        layer = _layer(w13, w13_scale, w2, w2_scale, swiglu)
        method.process_weights_after_loading(layer)
    return method, layer, captured, list(log)


def kernel_swiglu(method, captured: dict) -> dict:
    """alpha/beta/clamp as the MoE kernel will use them: the built experts' own
    attributes when the kernel was built, else the quant config handed to it."""
    kernel = getattr(method, "moe_kernel", None)
    experts = getattr(getattr(kernel, "impl", None), "fused_experts", None)
    qc = captured.get("moe_quant_config", getattr(method, "moe_quant_config", None))
    if experts is not None and hasattr(experts, "gemm1_alpha"):
        src = "experts"
        vals: tuple[Any, ...] = (experts.gemm1_alpha, experts.gemm1_beta, experts.gemm1_clamp_limit)
    else:
        src = "quant_config"
        vals = tuple(getattr(qc, k, None) for k in SWIGLU_KEYS)
    out = {"alpha": vals[0], "beta": vals[1], "limit": vals[2], "source": src}
    return out


def run_layer(method, layer, x, topk_weights, topk_ids) -> torch.Tensor:
    """``FusedMoE``'s call into the quant method for an already-routed batch (the
    model runner sets up vLLM's workspace manager first; done here if nobody has)."""
    import vllm.v1.worker.workspace as ws

    if getattr(ws, "_manager", None) is None:
        ws.init_workspace_manager(x.device)
    return method.apply(layer, x, topk_weights, topk_ids, None, None)
