"""Unit tests of the numerics emulation (no vLLM needed beyond the conversion module)."""

from __future__ import annotations

import importlib
import importlib.util
import sys

import pytest
import torch

from m3_smoke import golden, numerics

SMALL = dict(numerics.M3, hidden=512, inter=256, experts=4, tokens=8, seed=11)


def test_problem_is_deterministic_and_hash_based():
    a, b = numerics.make_problem(SMALL), numerics.make_problem(SMALL)
    assert numerics.inputs_sha256(a) == numerics.inputs_sha256(b)
    assert a["w13"].dtype == torch.float8_e4m3fn and a["w13_scale"].dtype == torch.uint8
    assert tuple(a["w13"].shape) == (4, 512, 512) and tuple(a["w2_scale"].shape) == (4, 512, 8)
    assert torch.allclose(a["topk_weights"].sum(-1), torch.ones(8))
    # the E8M0 scales vary inside 128x128 tiles (the outlier 32-blocks): what conversion must handle
    s = a["w13_scale"].to(torch.int32)
    assert int(s.max() - s.min()) >= 3
    # another seed, other inputs
    c = numerics.make_problem(dict(SMALL, seed=12))
    assert numerics.inputs_sha256(c) != numerics.inputs_sha256(a)


def test_mx_quantize_weight_follows_ocp_rule():
    w = torch.tensor([[1.0] * 31 + [3.5]])  # amax 3.5 -> floor(log2)=1 -> X = 2^(1-8)
    q, s = numerics.mx_quantize_weight(w)
    assert int(s[0, 0]) == 127 + 1 - 8
    assert float(q.float()[0, -1]) == 3.5 * 2**7 == 448.0
    back = numerics.dequant_mx(q, s)
    assert torch.equal(back.float(), w)


def test_fp8_facts_used_by_the_emulation():
    # FNUZ: same bits worth half; 0x80 is NaN in FNUZ but -0 in FN
    bits = torch.tensor([0x7E, 0x80], dtype=torch.uint8)
    fn, fnuz = bits.view(torch.float8_e4m3fn).float(), bits.view(torch.float8_e4m3fnuz).float()
    assert fn[0] == 448 and fnuz[0] == 224 and torch.isnan(fnuz[1]) and fn[1] == 0
    q = numerics.group_quant_act(torch.full((1, 128), 3.0), torch.float8_e4m3fnuz, 224.0)
    assert torch.allclose(q, torch.full((1, 128), 3.0, dtype=torch.float64))


def test_swiglu_oai_matches_vllm_formula():
    g = torch.tensor([[10.0, -1.0, 20.0, -9.0]])
    out = numerics.swiglu_oai(g, 1.702, 1.0, 7.0)
    gate = torch.tensor([7.0, -1.0])
    up = torch.tensor([7.0, -7.0])
    assert torch.allclose(out[0], gate * torch.sigmoid(1.702 * gate) * (up + 1.0))


def test_paths_agree_within_fp8_error_on_a_small_problem(patched_tree):
    sys.path.insert(0, str(patched_tree.site))
    try:
        mod = importlib.import_module(
            "vllm.model_executor.layers.quantization.utils.mxfp8_block_fp8"
        )
        prob = numerics.make_problem(SMALL)
        conv = numerics.convert_weights(prob, mod.convert_mxfp8_to_block_fp8)
    finally:
        sys.path.remove(str(patched_tree.site))
    nat, ref = numerics.native_mxfp8_emulated(prob), numerics.bf16_reference(prob)
    blk = numerics.block_fp8_emulated(prob, conv)
    assert 0.01 < numerics.rel_err(nat, ref) < 0.08
    assert 0.01 < numerics.rel_err(blk, ref) < 0.08
    assert numerics.rel_err(blk, nat) < 0.1
    # a conversion that forgets the FNUZ re-encoding halves every weight
    bad = {
        k: (v.view(torch.uint8).view(torch.float8_e4m3fnuz) if k in ("w13", "w2") else v / 2)
        for k, v in conv.items()
    }
    assert numerics.rel_err(numerics.block_fp8_emulated(prob, bad), nat) > 0.3


def test_golden_file_round_trip_and_size(tmp_path):
    path = tmp_path / "g.json"
    prob = numerics.make_problem(SMALL)
    out = numerics.native_mxfp8_emulated(prob)
    golden.write(path, golden.encode(out, prob, {"kind": "test"}))
    doc, back = golden.load(path)
    assert torch.equal(back, out) and doc["inputs_sha256"] == numerics.inputs_sha256(prob)
    text = path.read_text().replace(doc["output"]["sha256"], "0" * 64)
    path.write_text(text)
    with pytest.raises(golden.GoldenError, match="sha256 mismatch"):
        golden.load(path)


def test_shipped_golden_is_small_and_matches_the_emulation():
    from pathlib import Path

    GOLDEN = Path(__file__).resolve().parents[2] / "smoke" / "golden" / "m3_moe_native_mxfp8.json"
    assert GOLDEN.stat().st_size < 1024 * 1024
    doc, out = golden.load(GOLDEN)
    assert doc["producer"]["kind"] in ("cpu-emulation", "device")
    assert tuple(out.shape) == (numerics.M3["tokens"], numerics.M3["hidden"])
    prob = numerics.make_problem(dict(numerics.M3, **doc["problem"]))
    assert numerics.inputs_sha256(prob) == doc["inputs_sha256"]
    if doc["producer"]["kind"] == "cpu-emulation":
        assert torch.equal(numerics.native_mxfp8_emulated(prob), out)


def _src_conversion():
    from pathlib import Path

    src = (
        Path(__file__).resolve().parents[2]
        / "patches/src/vllm/model_executor/layers/quantization/utils"
        / "mxfp8_block_fp8.py"
    )
    spec = importlib.util.spec_from_file_location("m3_conv_src_for_numerics", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_problem_v2_has_tile_to_tile_spread():
    prob = numerics.make_problem(SMALL)
    s = prob["w13_scale"].to(torch.int32)  # [E, N, K/32]
    tile_max = s.view(4, 4, 128, 4, 4).amax(dim=(2, 4))  # per expert, per 128x128 tile
    # tile scales differ from tile to tile by several powers of two inside one expert
    assert int((tile_max.amax((1, 2)) - tile_max.amin((1, 2))).min()) >= 3
    assert numerics.PROBLEM_VERSION == 2


def test_per_tile_gate_names_one_doubled_tile():
    from m3_smoke import checks_numerics as C
    from m3_smoke.manifest import DEFAULT_THRESHOLDS

    conv_mod = _src_conversion()
    prob = numerics.make_problem(SMALL)
    conv = {}
    for n in ("w13", "w2"):
        conv[n], conv[f"{n}_scale"] = conv_mod.convert_mxfp8_to_block_fp8(
            prob[n], prob[f"{n}_scale"], fp8_dtype=torch.float8_e4m3fnuz
        )
    good = C.weight_errors(prob, conv)
    assert good["max_tile_rel_err_weights"] < 1e-5
    conv["w2_scale"] = conv["w2_scale"].clone()
    conv["w2_scale"][2, 1, 1] *= 2
    bad = C.weight_errors(prob, conv)
    assert bad["max_tile_rel_err_weights"] == pytest.approx(1.0, abs=1e-5)
    assert bad["worst_tile"] == ["w2", 2, 1, 1]
    msgs = C.gate(
        dict(bad, rel_err_vs_golden=0.07, rel_err_vs_bf16=0.05, image_vs_emulation=0.0),
        DEFAULT_THRESHOLDS,
    )
    assert "max_tile_rel_err_weights=1 > 0.1 (worst tile: w2 expert 2 tile [1,1])" in msgs


def test_gate_device_metrics():
    from m3_smoke import checks_numerics as C
    from m3_smoke.manifest import DEFAULT_THRESHOLDS

    base = {
        "rel_err_weights": 1e-6,
        "max_tile_rel_err_weights": 2e-6,
        "rel_err_vs_golden": 0.07,
        "rel_err_vs_bf16": 0.05,
        "image_vs_emulation": 0.0,
    }
    assert C.gate(dict(base), DEFAULT_THRESHOLDS) == []
    dev = dict(
        base,
        device_rel_err_vs_golden=0.07,
        device_rel_err_vs_bf16=0.05,
        device_vs_emulation=0.0255,
        device_conversion_mismatch={"total": 3},
        device_nonfinite=0,
    )
    assert C.gate(dev, DEFAULT_THRESHOLDS) == [
        "device_vs_emulation=0.0255 > 0.005",
        "device conversion differs from the CPU path (3 bytes/scales)",
    ]
