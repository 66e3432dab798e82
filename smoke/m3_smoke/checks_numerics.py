"""numerics_vs_native: the image's converted block-FP8 MoE path against the MI355X golden.

Everything the image decides comes from the image: the converted weights are what
the image's ModelOpt MXFP8 layer holds after its own load path
(``process_weights_after_loading``: the patched conversion), and the SwiGLU-OAI
alpha/beta/clamp are those of the MoE kernel that layer built (``TritonExperts``),
whose layer got them from the image's MiniMax-M3 model config. The golden and the
reference emulation use the MiniMax-M3 reference values of the problem definition.

On a GPU (``evaluate(..., device=...)``) the same layer is built on the device: the
conversion runs there (the module's Triton kernel), its bytes are compared with the
CPU torch path, and the batch runs through ``method.apply`` (the modular kernel with
``TritonExperts``), the path vLLM serves with.
"""

from __future__ import annotations

import contextlib
import math

import torch

from m3_smoke import golden, numerics
from m3_smoke.report import CheckFailed

# metric -> threshold key (every gated metric; the device ones only exist on a GPU)
GATES = {
    "rel_err_weights": "rel_err_weights",
    "max_tile_rel_err_weights": "max_tile_rel_err_weights",
    "rel_err_vs_golden": "rel_err_vs_golden",
    "rel_err_vs_bf16": "rel_err_vs_bf16",
    "image_vs_emulation": "image_vs_emulation",
    "device_rel_err_vs_golden": "rel_err_vs_golden",
    "device_rel_err_vs_bf16": "rel_err_vs_bf16",
    "device_vs_emulation": "device_vs_emulation",
}


def _finite(x) -> bool:
    return isinstance(x, float) and math.isfinite(x)


def weight_errors(prob: dict, conv: dict) -> dict:
    """Whole-tensor and worst-128x128-tile relative error of the converted weights."""
    num = den = 0.0
    worst, where = -1.0, None
    for name in ("w13", "w2"):
        for e in range(prob[name].shape[0]):
            q, s = prob[name][e], prob[f"{name}_scale"][e]
            bq, bs = conv[name][e], conv[f"{name}_scale"][e]
            ref, got = numerics.dequant_mx(q, s), numerics.dequant_block(bq, bs)
            num += float(((got - ref) ** 2).sum())
            den += float((ref**2).sum())
            tiles = numerics.tile_rel_errors(q, s, bq, bs)
            t = float(tiles.max()) if tiles.numel() else 0.0
            if not t <= worst:  # NaN sticks
                nt, kt = divmod(
                    int(torch.nan_to_num(tiles, nan=float("inf")).argmax()), tiles.shape[1]
                )
                worst, where = t, [name, e, nt, kt]
    return {
        "rel_err_weights": math.sqrt(num / den) if den else float("nan"),
        "max_tile_rel_err_weights": worst,
        "worst_tile": where,
    }


def check_converted(conv: dict, fp8_dtype, shapes: dict) -> None:
    for name in ("w13", "w2"):
        E, N, K = shapes[name]
        bw, bs = conv[name], conv[f"{name}_scale"]
        want_s = (E, -(-N // 128), -(-K // 128))
        if bw.dtype != fp8_dtype or tuple(bw.shape) != (E, N, K):
            raise CheckFailed(
                f"{name}: converted weight {bw.dtype}{list(bw.shape)}, want {fp8_dtype}{[E, N, K]}"
            )
        if bs.dtype != torch.float32 or tuple(bs.shape) != want_s:
            raise CheckFailed(
                f"{name}: converted scale {bs.dtype}{list(bs.shape)}, want float32{list(want_s)}"
            )


def _padded(t: torch.Tensor, total: int, device) -> torch.Tensor:
    out = torch.zeros((total, *t.shape[1:]), dtype=t.dtype, device=device)
    out[: t.shape[0]].copy_(t)
    return out


def image_layer(
    prob: dict, *, device="cpu", pad_experts_to: int = 0, select_ctx=None, build_ctx=None
):
    """Build the image's ModelOpt MXFP8 MoE layer on ``device`` holding the problem's
    MXFP8 experts (padded with never-routed zero experts to ``pad_experts_to``, so
    vLLM looks up the tuned table of the real layer size) and run its load path."""
    from m3_smoke import layer as L

    E = prob["w13"].shape[0]
    total = max(E, pad_experts_to)
    t = {k: _padded(prob[k], total, device) for k in ("w13", "w13_scale", "w2", "w2_scale")}
    swiglu = L.image_swiglu()
    with build_ctx if build_ctx is not None else contextlib.nullcontext():
        method, layer, captured, log = L.build_layer(
            t["w13"], t["w13_scale"], t["w2"], t["w2_scale"], swiglu=swiglu, select_ctx=select_ctx
        )
    return method, layer, L.kernel_swiglu(method, captured), swiglu, log


def layer_weights(layer, E: int) -> dict:
    return {
        "w13": layer.w13_weight.data[:E],
        "w13_scale": layer.w13_weight_scale.data[:E],
        "w2": layer.w2_weight.data[:E],
        "w2_scale": layer.w2_weight_scale.data[:E],
    }


def conversion_mismatch(dev_conv: dict, cpu_conv: dict) -> dict:
    """Bytes (weights) and values (scales) where the device conversion differs from the CPU one."""
    out = {}
    for name in ("w13", "w2"):
        a = dev_conv[name].view(torch.uint8)
        b = cpu_conv[name].to(a.device).view(torch.uint8)
        out[f"{name}_bytes"] = int((a != b).sum())
        sa, sb = dev_conv[f"{name}_scale"], cpu_conv[f"{name}_scale"].to(a.device)
        out[f"{name}_scales"] = int((sa.view(torch.int32) != sb.view(torch.int32)).sum())
    out["total"] = sum(out.values())
    return out


def evaluate(
    prob: dict,
    gold: torch.Tensor,
    *,
    fp8_dtype,
    device=None,
    pad_experts_to: int = 128,
    select_ctx=None,
    run_ctx=None,
    cpu_layer_ctx=None,
    log_lines=None,
) -> dict:
    """All metrics of the check for one problem (see the module docstring).

    CPU part: the image's layer built on CPU (``cpu_layer_ctx``: the platform mock
    when there is no GPU of the right kind) supplies the converted weights and the
    kernel's SwiGLU parameters; everything is compared in emulation. ``device``: the
    layer is built again on the GPU (``select_ctx`` around its backend choice,
    ``run_ctx`` around the whole device part) and the batch runs through it.
    """
    with run_ctx if (device is not None and run_ctx is not None) else contextlib.nullcontext():
        return _evaluate(
            prob,
            gold,
            fp8_dtype=fp8_dtype,
            device=device,
            pad_experts_to=pad_experts_to,
            select_ctx=select_ctx,
            cpu_layer_ctx=cpu_layer_ctx,
            log_lines=log_lines,
        )


def _evaluate(
    prob, gold, *, fp8_dtype, device, pad_experts_to, select_ctx, cpu_layer_ctx, log_lines
) -> dict:
    from m3_smoke.vllm_env import conversion_module

    p = prob["params"]
    reference = {"alpha": p["alpha"], "beta": p["beta"], "limit": p["limit"]}
    E = prob["w13"].shape[0]
    shapes = {n: tuple(prob[n].shape) for n in ("w13", "w2")}
    m: dict = {"swiglu_reference": reference}

    if device is None:
        method, layer, kernel_sw, model_sw, log = image_layer(
            prob, device="cpu", build_ctx=cpu_layer_ctx
        )
        conv = {k: v.detach().clone() for k, v in layer_weights(layer, E).items()}
        m["conversion"] = "image ModelOpt layer load path (CPU torch path)"
    else:
        mod = conversion_module()
        cpu = {
            n: mod.convert_mxfp8_to_block_fp8(
                prob[n].cpu(), prob[f"{n}_scale"].cpu(), fp8_dtype=fp8_dtype, impl="torch"
            )
            for n in ("w13", "w2")
        }
        conv = {
            "w13": cpu["w13"][0],
            "w13_scale": cpu["w13"][1],
            "w2": cpu["w2"][0],
            "w2_scale": cpu["w2"][1],
        }
        conv = {
            k: v.to(prob["w13"].device) for k, v in conv.items()
        }  # the emulation runs where the problem is
        method, layer, kernel_sw, model_sw, log = image_layer(
            prob, device=device, pad_experts_to=pad_experts_to, select_ctx=select_ctx
        )
        m["conversion"] = (
            "image ModelOpt layer load path on the device, byte-compared with the CPU torch path"
        )
    if log_lines is not None:
        log_lines.extend(log)
    m["swiglu_model_config"] = model_sw
    m["swiglu_image"] = {k: kernel_sw[k] for k in ("alpha", "beta", "limit", "source")}
    check_converted(conv, fp8_dtype, shapes)
    m.update(weight_errors(prob, conv))

    emu = numerics.block_fp8_emulated(prob, conv, fp8_dtype)
    image_sw = {k: kernel_sw[k] for k in ("alpha", "beta", "limit")}
    if any(v is None for v in image_sw.values()):
        raise CheckFailed(f"the image's MoE kernel has no SwiGLU-OAI parameters: {image_sw}", **m)
    image_sw = {k: float(v) for k, v in image_sw.items()}
    same = image_sw == reference
    img = emu if same else numerics.block_fp8_emulated(prob, conv, fp8_dtype, swiglu=image_sw)
    ref = numerics.bf16_reference(prob)
    m["rel_err_vs_golden"] = numerics.rel_err(img, gold)
    m["rel_err_vs_bf16"] = numerics.rel_err(img, ref)
    m["image_vs_emulation"] = 0.0 if same else numerics.rel_err(img, emu)
    m["native_vs_bf16"] = numerics.rel_err(gold, ref)
    m["converted_nonfinite"] = int((~torch.isfinite(img.float())).sum())

    if device is not None:
        dev_conv = layer_weights(layer, E)
        m["device_conversion_mismatch"] = conversion_mismatch(dev_conv, conv)
        total = layer.w13_weight.shape[0]
        m["device_padded_experts_nonzero_bytes"] = int(
            (layer.w13_weight.data[E:total].view(torch.uint8) != 0).sum()
            + (layer.w2_weight.data[E:total].view(torch.uint8) != 0).sum()
        )
        from vllm.model_executor.layers.fused_moe.fused_moe import get_moe_configs

        from m3_smoke import layer as L
        from m3_smoke.vllm_env import captured_vllm_log

        get_moe_configs.cache_clear()
        with captured_vllm_log() as run_log:
            out = L.run_layer(
                method,
                layer,
                prob["hidden"].to(device),
                prob["topk_weights"].to(device),
                prob["topk_ids"].to(device),
            )
            if out.is_cuda:
                torch.cuda.synchronize()
        out = out.float().cpu()
        m["device_moe_config"] = [
            ln for ln in run_log if "configuration from" in ln or "default MoE config" in ln
        ]
        m["device_kernel"] = (
            f"{type(method.moe_kernel.impl.fused_experts).__name__} via "
            f"{type(method.moe_kernel.impl.prepare_finalize).__name__}"
        )
        m["device_rel_err_vs_golden"] = numerics.rel_err(out, gold)
        m["device_rel_err_vs_bf16"] = numerics.rel_err(out, ref)
        # the reference emulation in both activation-scale roundings (numerics.group_quant_act)
        by_rounding = {
            "amax*(1/max)": numerics.rel_err(out, emu),
            "amax/max": numerics.rel_err(
                out, numerics.block_fp8_emulated(prob, conv, fp8_dtype, scale_div=True)
            ),
        }
        m["device_vs_emulation_by_scale_rounding"] = by_rounding
        m["device_vs_emulation"] = min(by_rounding.values())
        m["device_nonfinite"] = int((~torch.isfinite(out)).sum())
    return m


def gate(m: dict, thr: dict) -> list[str]:
    """Gate failures, one phrase each (empty: the metrics pass)."""
    bad = []
    for key, tkey in GATES.items():
        if key not in m:
            continue
        v = m[key]
        if not _finite(v):
            bad.append(f"{key}={v} (non-finite)")
        elif not v <= thr[tkey]:
            bad.append(f"{key}={v:.4g} > {thr[tkey]:g}")
    if bad and m.get("worst_tile") and any(b.startswith("max_tile_rel_err_weights") for b in bad):
        name, e, nt, kt = m["worst_tile"]
        bad = [
            b + f" (worst tile: {name} expert {e} tile [{nt},{kt}])"
            if b.startswith("max_tile")
            else b
            for b in bad
        ]
    if m.get("converted_nonfinite"):
        bad.append(f"{m['converted_nonfinite']} non-finite outputs")
    if m.get("device_nonfinite"):
        bad.append(f"{m['device_nonfinite']} non-finite device outputs")
    mm = m.get("device_conversion_mismatch")
    if mm and mm["total"]:
        bad.append(f"device conversion differs from the CPU path ({mm['total']} bytes/scales)")
    if m.get("device_padded_experts_nonzero_bytes"):
        bad.append("device conversion wrote non-zero bytes into the zero experts")
    return bad


def check_numerics_vs_native(manifest: dict, mode: str) -> dict:
    from m3_smoke.vllm_env import mocked_platform, real_gpu_arch

    thr = manifest["thresholds"]
    try:
        doc, gold = golden.load(manifest["golden"])
    except golden.GoldenError as exc:
        raise CheckFailed(str(exc)) from None
    if doc.get("problem_version") != numerics.PROBLEM_VERSION:
        raise CheckFailed(
            f"golden problem_version {doc.get('problem_version')} != {numerics.PROBLEM_VERSION}"
        )
    params = dict(numerics.M3, **doc["problem"])
    prob = numerics.make_problem(params)
    sha = numerics.inputs_sha256(prob)
    if sha != doc["inputs_sha256"]:
        raise CheckFailed(
            f"golden inputs_sha256 {doc['inputs_sha256'][:12]} != regenerated {sha[:12]}"
        )

    arch = real_gpu_arch() if mode == "auto" else None
    on_gfx942 = arch is not None and arch.startswith("gfx94")
    fnuz = torch.float8_e4m3fnuz
    try:
        m = evaluate(
            prob,
            gold,
            fp8_dtype=fnuz,
            cpu_layer_ctx=None if on_gfx942 else mocked_platform("gfx942"),
        )
        if on_gfx942:
            dev = evaluate(prob, gold, fp8_dtype=fnuz, device="cuda")
            m.update({k: v for k, v in dev.items() if k.startswith("device_")})
    except CheckFailed:
        raise
    except Exception as exc:
        raise CheckFailed(
            f"the image's MXFP8 MoE layer failed: {type(exc).__name__}: {exc}"
        ) from None
    m["shape"] = {k: params[k] for k in ("tokens", "hidden", "inter", "experts", "top_k")}
    m["golden_producer"] = doc.get("producer", {})
    m["thresholds"] = dict(thr)
    m["device"] = arch or "cpu-emulation"
    m["golden_vs_native_emulation"] = numerics.rel_err(gold, numerics.native_mxfp8_emulated(prob))
    bad = gate(m, thr)
    if bad:
        raise CheckFailed("converted block-FP8 path vs native MXFP8: " + "; ".join(bad), **m)
    return m


def record_golden(out_path, *, emulate: bool) -> dict:
    from m3_smoke.vllm_env import real_gpu_arch

    prob = numerics.make_problem(numerics.M3)
    if emulate:
        out = numerics.native_mxfp8_emulated(prob)
        producer: dict[str, object] = {
            "kind": "cpu-emulation",
            "of": "vllm fused_moe_mxfp8_native (gfx950)",
            "torch": torch.__version__,
        }
    else:
        arch = real_gpu_arch()
        if arch is None or not arch.startswith("gfx95"):
            raise RuntimeError(
                f"record-golden needs a gfx950 (MI355X) GPU, found {arch or 'none'}; use --emulate "
                "for the CPU emulation"
            )
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
