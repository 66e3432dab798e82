"""MXFP8 MoE oracle selection and ModelOpt load-time conversion, exercised in the
real (patched) vLLM 0.24.0 modules with the platform mocked."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest
import torch

NATIVE_LINE = "Using native CDNA4 (gfx950) MXFP8 dot_scaled MoE backend."
EMULATION_PREFIX = "No native MXFP8 MoE backend available on this device"
MXFP8_ORACLE = "vllm.model_executor.layers.fused_moe.oracle.mxfp8"


class FakePlatform:
    def __init__(self, rocm: bool, mx: bool, fnuz: bool):
        self._rocm, self._mx, self._fnuz = rocm, mx, fnuz

    def is_rocm(self):
        return self._rocm

    def supports_mx(self):
        return self._mx

    def is_fp8_fnuz(self):
        return self._fnuz

    def fp8_dtype(self):
        return torch.float8_e4m3fnuz if self._fnuz else torch.float8_e4m3fn


def _no_vendor_backend(backend, config):
    # On ROCm none of FlashInfer-TRTLLM / DeepGEMM / Marlin / XPU support MXFP8.
    raise ValueError(f"{backend.value} unsupported here")


def _select(monkeypatch, platform):
    oracle = importlib.import_module(MXFP8_ORACLE)
    monkeypatch.setattr(oracle, "current_platform", platform)
    monkeypatch.setattr(oracle, "_select_kernel_cls", _no_vendor_backend)
    config = SimpleNamespace(moe_backend="auto")
    first = oracle.select_mxfp8_moe_backend(config)
    second = oracle.select_mxfp8_moe_backend(config)
    assert first == second
    return first


def test_gfx942_selects_triton_block_fp8(monkeypatch, conv, vllm_logs):
    from vllm.model_executor.layers.fused_moe.experts.triton_moe import TritonExperts
    from vllm.model_executor.layers.fused_moe.oracle.fp8 import Fp8MoeBackend

    backend, cls = _select(monkeypatch, FakePlatform(rocm=True, mx=False, fnuz=True))
    assert backend == Fp8MoeBackend.TRITON and cls is TritonExperts
    assert vllm_logs.count(conv.BACKEND_MARKER) == 1  # logged once for two calls
    assert conv.BACKEND_MARKER == (
        "Using Triton block-FP8 fused MoE backend for MXFP8 weights on an FP8-FNUZ "
        "(gfx942) device: MXFP8 experts are converted to 128x128 block FP8 at load time."
    )
    assert not any(m.startswith(EMULATION_PREFIX) or m == NATIVE_LINE for m in vllm_logs)


def test_gfx950_keeps_native_cdna4(monkeypatch, conv, vllm_logs):
    from vllm.model_executor.layers.fused_moe.experts.mxfp8_native_moe import (
        Mxfp8NativeTritonExperts,
    )
    from vllm.model_executor.layers.fused_moe.oracle.fp8 import Fp8MoeBackend

    backend, cls = _select(monkeypatch, FakePlatform(rocm=True, mx=True, fnuz=False))
    assert backend == Fp8MoeBackend.NATIVE_MXFP8 and cls is Mxfp8NativeTritonExperts
    assert vllm_logs.count(NATIVE_LINE) == 1
    assert conv.BACKEND_MARKER not in vllm_logs


def test_other_rocm_keeps_emulation(monkeypatch, conv, vllm_logs):
    from vllm.model_executor.layers.fused_moe.oracle.fp8 import Fp8MoeBackend

    backend, _ = _select(monkeypatch, FakePlatform(rocm=True, mx=False, fnuz=False))
    assert backend == Fp8MoeBackend.EMULATION
    assert sum(m.startswith(EMULATION_PREFIX) for m in vllm_logs) == 1
    assert conv.BACKEND_MARKER not in vllm_logs


def test_non_rocm_unchanged(monkeypatch, conv, vllm_logs):
    with pytest.raises(ValueError, match="No MXFP8 MoE backends available."):
        _select(monkeypatch, FakePlatform(rocm=False, mx=False, fnuz=False))
    assert conv.BACKEND_MARKER not in vllm_logs


def test_modelopt_converts_at_load(monkeypatch, conv, vllm_logs):
    import vllm.platforms
    from vllm.model_executor.layers.fused_moe.experts.triton_moe import TritonExperts
    from vllm.model_executor.layers.fused_moe.oracle.fp8 import Fp8MoeBackend
    from vllm.model_executor.layers.quantization import modelopt

    monkeypatch.setattr(
        vllm.platforms, "current_platform", FakePlatform(rocm=True, mx=False, fnuz=True)
    )
    calls = {}

    def fake_make_kernel(**kw):
        calls.update(kw)
        return "kernel"

    monkeypatch.setattr(modelopt, "make_fp8_moe_kernel", fake_make_kernel)

    E, H, inter = 3, 256, 192  # inter not a multiple of 128: padded tiles
    g = torch.Generator().manual_seed(5)

    def mx(n, k):
        w = (torch.randn(E, n, k, generator=g) * 8).clamp(-448, 448).to(torch.float8_e4m3fn)
        s = torch.randint(115, 125, (E, n, k // 32), generator=g, dtype=torch.uint8)
        return w, s

    w13, s13 = mx(2 * inter, H)
    w2, s2 = mx(H, inter)
    layer = torch.nn.Module()
    for name, t in (
        ("w13_weight", w13),
        ("w2_weight", w2),
        ("w13_weight_scale", s13),
        ("w2_weight_scale", s2),
    ):
        layer.register_parameter(name, torch.nn.Parameter(t.clone(), requires_grad=False))
    layer.swiglu_alpha, layer.swiglu_beta, layer.swiglu_limit = 1.702, 1.0, 7.0
    layer._expert_routing_tables = lambda: None

    method = modelopt.ModelOptMxFp8FusedMoE.__new__(modelopt.ModelOptMxFp8FusedMoE)
    method.weight_block_size = [1, 32]
    method.mxfp8_backend = Fp8MoeBackend.TRITON
    method.experts_cls = TritonExperts
    method.moe = SimpleNamespace(is_act_and_mul=True)
    method.process_weights_after_loading(layer)

    fnuz = torch.float8_e4m3fnuz
    assert layer.w13_weight.dtype == fnuz and layer.w2_weight.dtype == fnuz
    assert layer.w13_weight_scale.shape == (E, 3, 2)
    assert layer.w2_weight_scale.shape == (E, 2, 2)
    assert layer.weight_block_size == [128, 128] == method.weight_block_size
    for w, s, nw, ns in (
        (w13, s13, layer.w13_weight, layer.w13_weight_scale),
        (w2, s2, layer.w2_weight, layer.w2_weight_scale),
    ):
        ref = conv.dequant_mxfp8(w, s)
        got = conv.dequant_block_fp8(nw.data, ns.data)
        # scales spread over 10 binades per tile: only shifted subnormals round
        assert float((got - ref).norm() / ref.norm()) < 1e-3
    lines = [m for m in vllm_logs if m.startswith(conv.CONVERSION_MARKER)]
    assert lines == [
        f"{conv.CONVERSION_MARKER} (3 experts/layer, torch.float8_e4m3fnuz, "
        "128x128 blocks); MoE runs on the Triton block-FP8 kernel."
    ]
    qc = calls["moe_quant_config"]
    assert qc is method.moe_quant_config and calls["experts_cls"] is TritonExperts
    assert qc.block_shape == [128, 128]
    assert (qc.gemm1_alpha, qc.gemm1_beta, qc.gemm1_clamp_limit) == (1.702, 1.0, 7.0)
    assert qc.w1_scale is layer.w13_weight_scale and qc.w2_scale is layer.w2_weight_scale
