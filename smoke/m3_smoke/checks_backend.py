"""Backend-selection log markers and the SwiGLU parameters of the converted path."""

from __future__ import annotations

import re
from typing import Any

from m3_smoke.report import CheckFailed

NATIVE_LINE = "Using native CDNA4 (gfx950) MXFP8 dot_scaled MoE backend."
# What each vLLM release names its gfx950 MXFP8 backends. 0.24.0: NATIVE_MXFP8 + NATIVE_LINE.
# 0.27.0 on: a backend list (AITER_MXFP8 with flydsl, else TRITON_MXFP8) and the oracle's
# "Using '<backend>' MxFp8 MoE backend." (0.27-0.33) /
# "Using <backend> Mxfp8 MoE backend..." (0.34).
NATIVE_BACKENDS = ("NATIVE_MXFP8", "TRITON_MXFP8", "AITER_MXFP8")
_SELECTED_RE = re.compile(r"^Using '?(?P<backend>[A-Z0-9_]+)'? (?i:mxfp8) MoE backend\b")
EMULATION_LINE = "No native MXFP8 MoE backend available on this device"

M3_SWIGLU = {"gemm1_alpha": 1.702, "gemm1_beta": 1.0, "gemm1_clamp_limit": 7.0}


def _markers() -> tuple[str, str]:
    from m3_smoke.vllm_env import conversion_module

    try:
        mod = conversion_module()
    except ImportError as exc:
        raise CheckFailed(f"conversion module not importable: {exc}") from None
    bm = getattr(mod, "BACKEND_MARKER", None)
    cm = getattr(mod, "CONVERSION_MARKER", None)
    if not isinstance(bm, str) or not bm.strip():
        raise CheckFailed("conversion module exports no BACKEND_MARKER string")
    return bm, cm if isinstance(cm, str) else ""


def _platform_ctx(arch: str, mode: str, device_name: str):
    """Real platform when the real GPU is ``arch`` (mode auto), mocked otherwise."""
    import contextlib

    from m3_smoke.vllm_env import mocked_platform, real_gpu_arch

    real = real_gpu_arch() if mode == "auto" else None
    if real == arch:
        return contextlib.nullcontext(), "real"
    return mocked_platform(arch, device_name), "mock"


def select_backend(arch: str, mode: str, device_name: str = "AMD_Instinct_MI300X"):
    """Drive vLLM's own MXFP8 MoE oracle; return (backend, experts_cls, log, platform)."""
    from m3_smoke.vllm_env import captured_vllm_log, moe_config

    ctx, kind = _platform_ctx(arch, mode, device_name)
    with ctx:
        from vllm.model_executor.layers.fused_moe.oracle.mxfp8 import (
            select_mxfp8_moe_backend,
        )

        with captured_vllm_log() as log:
            backend, cls = select_mxfp8_moe_backend(moe_config())
    return backend, cls, list(log), kind


def check_backend_marker_gfx942(mode: str, device_name: str) -> dict:
    marker, _ = _markers()
    try:
        backend, cls, log, kind = select_backend("gfx942", mode, device_name)
    except Exception as exc:
        raise CheckFailed(
            f"select_mxfp8_moe_backend raised on gfx942: {type(exc).__name__}: {exc}"
        ) from exc
    details = {
        "platform": kind,
        "backend": getattr(backend, "value", str(backend)),
        "experts": cls.__name__,
        "log": [ln for ln in log if "MXFP8" in ln or "MxFp8" in ln or ln == marker],
    }
    if marker not in log:
        raise CheckFailed(
            f"BACKEND_MARKER not logged on gfx942 ({kind}); backend "
            f"{details['backend']}/{cls.__name__}",
            **details,
        )
    if any(EMULATION_LINE in ln for ln in log):
        raise CheckFailed(f"BF16-emulation line logged on gfx942 ({kind})", **details)
    if "EMULATION" in details["backend"] or "Emulation" in cls.__name__:
        raise CheckFailed(f"gfx942 still selects the emulation backend ({cls.__name__})", **details)
    return details


def check_backend_marker_gfx950(mode: str, device_name: str) -> dict:
    marker, _ = _markers()
    try:
        backend, cls, log, kind = select_backend("gfx950", mode, "AMD_Instinct_MI355X")
    except Exception as exc:
        raise CheckFailed(
            f"select_mxfp8_moe_backend raised on gfx950: {type(exc).__name__}: {exc}"
        ) from exc
    details = {
        "platform": kind,
        "backend": getattr(backend, "value", str(backend)),
        "experts": cls.__name__,
    }
    named = [m.group("backend") for m in map(_SELECTED_RE.match, log) if m]
    if NATIVE_LINE not in log and details["backend"] not in named:
        raise CheckFailed(
            f"native gfx950 line not logged ({kind}); backend {details['backend']}", **details
        )
    if marker in log or any(EMULATION_LINE in ln for ln in log):
        raise CheckFailed(f"gfx950 logged the converted/emulation line ({kind})", **details)
    if details["backend"] not in NATIVE_BACKENDS or "Emulation" in cls.__name__:
        raise CheckFailed(
            f"gfx950 selected {details['backend']}, not a native MXFP8 backend "
            f"({', '.join(NATIVE_BACKENDS)})",
            **details,
        )
    return details


# ---------------------------------------------------------------- swiglu_params


def build_converted_quant_config(mode: str, device_name: str):
    """Run the ModelOpt MXFP8 MoE load path (the MiniMax-M3 checkpoint's method) on a
    tiny gfx942 layer whose SwiGLU-OAI parameters come from the image's MiniMax-M3
    model config, as the model's FusedMoE gets them. Returns (quant_config, layer,
    backend, experts_cls, kernel swiglu, log, platform kind)."""
    import torch

    from m3_smoke import layer as L

    E, N, K = 2, 256, 512
    g = torch.Generator().manual_seed(0)

    def w(*shape):
        return torch.randn(*shape, generator=g).clamp(-400, 400).to(torch.float8_e4m3fn)

    def s(*shape):
        return torch.randint(120, 130, shape, generator=g, dtype=torch.int32).to(torch.uint8)

    ctx, kind = _platform_ctx("gfx942", mode, device_name)
    with ctx:
        method, layer, captured, log = L.build_layer(
            w(E, 2 * N, K),
            s(E, 2 * N, K // 32),
            w(E, K, N),
            s(E, K, N // 32),
            swiglu=L.image_swiglu(),
        )
    quant_config = captured.get("moe_quant_config", getattr(method, "moe_quant_config", None))
    return (
        quant_config,
        layer,
        getattr(method, "mxfp8_backend", None),
        method.experts_cls,
        L.kernel_swiglu(method, captured),
        log,
        kind,
    )


def check_swiglu_params(mode: str, device_name: str) -> dict:
    import torch

    try:
        qcfg, layer, backend, cls, kernel_sw, log, kind = build_converted_quant_config(
            mode, device_name
        )
    except Exception as exc:
        raise CheckFailed(
            f"ModelOpt MXFP8 MoE load path failed on gfx942: {type(exc).__name__}: {exc}"
        ) from exc
    if qcfg is None:
        raise CheckFailed("no FusedMoEQuantConfig was built on gfx942")
    got: dict[str, Any] = {k: getattr(qcfg, k, None) for k in M3_SWIGLU}
    details = {
        "platform": kind,
        "backend": getattr(backend, "value", str(backend)),
        "experts": getattr(cls, "__name__", str(cls)),
        "block_shape": qcfg.block_shape,
        "quant_dtype": str(qcfg.quant_dtype),
        "w13_dtype": str(layer.w13_weight.dtype),
        "w13_scale": [str(layer.w13_weight_scale.dtype), list(layer.w13_weight_scale.shape)],
        "kernel_swiglu": kernel_sw,
        **got,
    }
    if list(qcfg.block_shape or []) != [128, 128]:
        raise CheckFailed(
            f"quant config is not the converted block-FP8 one (block_shape {qcfg.block_shape}, "
            f"backend {details['backend']})",
            **details,
        )
    if qcfg.quant_dtype not in (torch.float8_e4m3fnuz, torch.float8_e4m3fn):
        raise CheckFailed(f"quant dtype {qcfg.quant_dtype} is not FP8", **details)
    bad = [
        f"{k}={got[k]!r} (want {v})"
        for k, v in M3_SWIGLU.items()
        if got[k] is None or abs(float(got[k]) - v) > 1e-6
    ]
    if bad:
        raise CheckFailed(
            "SwiGLU-OAI parameters lost in the converted quant config: " + ", ".join(bad), **details
        )
    kbad = [
        f"{k}={kernel_sw[k]!r} (want {v})"
        for k, v in zip(("alpha", "beta", "limit"), M3_SWIGLU.values(), strict=True)
        if kernel_sw[k] is None or abs(float(kernel_sw[k]) - v) > 1e-6
    ]
    if kbad:
        raise CheckFailed(
            f"the MoE kernel ({kernel_sw['source']}) uses other SwiGLU-OAI parameters: "
            + ", ".join(kbad),
            **details,
        )
    if layer.w13_weight.dtype != torch.float8_e4m3fnuz and kind == "mock":
        raise CheckFailed(
            f"converted w13 dtype {layer.w13_weight.dtype}, want float8_e4m3fnuz", **details
        )
    if layer.w13_weight_scale.dtype != torch.float32 or list(layer.w13_weight_scale.shape) != [
        2,
        4,
        4,
    ]:
        raise CheckFailed(
            "converted w13 scale "
            f"{layer.w13_weight_scale.dtype}{list(layer.w13_weight_scale.shape)}, "
            "want float32[2, 4, 4]",
            **details,
        )
    return details
