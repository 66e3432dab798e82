"""numerics_vs_native: the converted block-FP8 path against the MI355X golden."""

from __future__ import annotations

import math

import torch

from m3_smoke import golden, numerics
from m3_smoke.report import CheckFailed


def _finite(x: float) -> bool:
    return isinstance(x, float) and math.isfinite(x)


def _weights_rel_err(prob: dict, conv: dict) -> float:
    num = den = 0.0
    for name in ("w13", "w2"):
        for e in range(prob[name].shape[0]):
            ref = numerics.dequant_mx(prob[name][e], prob[f"{name}_scale"][e])
            got = numerics.dequant_block(conv[name][e], conv[f"{name}_scale"][e])
            num += float(((got - ref) ** 2).sum())
            den += float((ref**2).sum())
    return math.sqrt(num / den) if den else float("nan")


def check_numerics_vs_native(manifest: dict, mode: str) -> dict:
    from m3_smoke.vllm_env import conversion_module, real_gpu_arch

    thr = manifest["thresholds"]
    try:
        doc, gold = golden.load(manifest["golden"])
    except golden.GoldenError as exc:
        raise CheckFailed(str(exc)) from None
    if doc.get("problem_version") != numerics.PROBLEM_VERSION:
        raise CheckFailed(f"golden problem_version {doc.get('problem_version')} != {numerics.PROBLEM_VERSION}")
    params = dict(numerics.M3, **doc["problem"])
    prob = numerics.make_problem(params)
    sha = numerics.inputs_sha256(prob)
    if sha != doc["inputs_sha256"]:
        raise CheckFailed(f"golden inputs_sha256 {doc['inputs_sha256'][:12]} != regenerated {sha[:12]}")
    try:
        mod = conversion_module()
        conv = numerics.convert_weights(prob, mod.convert_mxfp8_to_block_fp8, torch.float8_e4m3fnuz)
    except Exception as exc:
        raise CheckFailed(f"convert_mxfp8_to_block_fp8 failed: {type(exc).__name__}: {exc}") from None

    blk = numerics.block_fp8_emulated(prob, conv)
    ref = numerics.bf16_reference(prob)
    nat = numerics.native_mxfp8_emulated(prob)
    m = {
        "shape": {k: params[k] for k in ("tokens", "hidden", "inter", "experts", "top_k")},
        "golden_producer": doc.get("producer", {}),
        "thresholds": dict(thr),
        "rel_err_weights": _weights_rel_err(prob, conv),
        "rel_err_vs_golden": numerics.rel_err(blk, gold),
        "rel_err_vs_bf16": numerics.rel_err(blk, ref),
        "native_vs_bf16": numerics.rel_err(gold, ref),
        "golden_vs_native_emulation": numerics.rel_err(gold, nat),
        "converted_nonfinite": int((~torch.isfinite(blk.float())).sum()),
    }
    gated = ["rel_err_weights", "rel_err_vs_golden", "rel_err_vs_bf16"]
    arch = real_gpu_arch() if mode == "auto" else None
    m["device"] = arch or "cpu-emulation"
    if arch is not None and arch.startswith("gfx94"):
        dev, cfg_lines = numerics.block_fp8_device(prob, conv)
        m["device_moe_config"] = cfg_lines
        m["device_rel_err_vs_golden"] = numerics.rel_err(dev, gold)
        m["device_rel_err_vs_bf16"] = numerics.rel_err(dev, ref)
        m["device_vs_emulation"] = numerics.rel_err(dev, blk)
        m["device_nonfinite"] = int((~torch.isfinite(dev.float())).sum())
    bad = []
    for key in gated:
        v = m[key]
        if not _finite(v) or not v <= thr[key]:
            bad.append(f"{key}={v:.4g} > {thr[key]:g}" if _finite(v) else f"{key}={v} (non-finite)")
    for key, tkey in (("device_rel_err_vs_golden", "rel_err_vs_golden"), ("device_rel_err_vs_bf16", "rel_err_vs_bf16")):
        if key in m and (not _finite(m[key]) or not m[key] <= thr[tkey]):
            bad.append(f"{key}={m[key]:.4g} > {thr[tkey]:g}")
    if m["converted_nonfinite"]:
        bad.append(f"{m['converted_nonfinite']} non-finite outputs")
    if bad:
        raise CheckFailed("converted block-FP8 path vs native MXFP8: " + "; ".join(bad), **m)
    return m


def record_golden(out_path, *, emulate: bool) -> dict:
    from m3_smoke.vllm_env import real_gpu_arch

    prob = numerics.make_problem(numerics.M3)
    if emulate:
        out = numerics.native_mxfp8_emulated(prob)
        producer = {"kind": "cpu-emulation", "of": "vllm fused_moe_mxfp8_native (gfx950)", "torch": torch.__version__}
    else:
        arch = real_gpu_arch()
        if arch is None or not arch.startswith("gfx95"):
            raise RuntimeError(f"record-golden needs a gfx950 (MI355X) GPU, found {arch or 'none'}; use --emulate for the CPU emulation")
        import vllm

        out = numerics.native_mxfp8_device(prob)
        props = torch.cuda.get_device_properties(0)
        producer = {
            "kind": "device",
            "arch": arch,
            "device": props.name,
            "torch": torch.__version__,
            "hip": torch.version.hip,
            "vllm": getattr(vllm, "__version__", "?"),
            "golden_vs_cpu_emulation": numerics.rel_err(out, numerics.native_mxfp8_emulated(prob)),
        }
    doc = golden.encode(out, prob, producer)
    golden.write(out_path, doc)
    return doc
