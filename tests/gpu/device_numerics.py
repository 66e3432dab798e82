#!/usr/bin/env python3
"""GPU harness: the image's `numerics_vs_native` device path on a CUDA GPU (not in the image).

Runs ``m3_smoke.checks_numerics.evaluate`` with a device: the image's ModelOpt MXFP8
MoE layer is built on the GPU from the problem's MXFP8 experts, its load path
converts them there (the conversion module's Triton kernel, in the platform's FP8
dtype: E4M3FN on CUDA), the result is byte-compared with the CPU torch path, and the
batch runs through ``method.apply``: vLLM's modular kernel with ``TritonExperts``
(the real Triton fused-MoE GEMMs). Figures: vs the native-MXFP8 golden (exact
emulation), vs BF16, device vs emulation, for the smoke problem (vs the shipped
golden file) and the MiniMax-M3 layer shapes, plus a SwiGLU fault and a seed sweep.

What is not the production machine (see docs/validation.md, "Device path on the H200"):
* vLLM's compiled ops are replaced by ``vllm_torch_ops`` (torch code; vLLM's own Triton
  fallback for the 1x128 activation quant);
* vLLM's MXFP8 oracle is shown a gfx942 platform while it picks the backend (CUDA has
  no such branch); everything after that runs on the real CUDA platform.

    python3 tests/gpu/device_numerics.py --vllm-site DIR [--json OUT] [--cpu-dry-run]

``--vllm-site``: the folder holding a vLLM 0.24.0 tree with ``patches/series`` applied.
``--cpu-dry-run``: the same plumbing on CPU, small shapes, the Triton GEMM replaced by
torch (what tests/gpu/test_harness_cpu.py runs).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

SHAPES = {
    # name: problem overrides, pad_experts_to
    "smoke": ({}, 128),  # the image's check, vs the shipped golden
    "tp8": ({"experts": 128, "inter": 384}, 128),  # MiniMax-M3 MoE layer at TP8 (E=128,N=384)
    "ep8": ({"experts": 16, "inter": 3072}, 16),  # TP8+EP8 (E=16,N=3072)
}
DRY = {"smoke": ({"hidden": 512, "inter": 256, "experts": 4, "tokens": 8, "seed": 11}, 8)}
KEYS = (
    "rel_err_weights",
    "max_tile_rel_err_weights",
    "rel_err_vs_golden",
    "rel_err_vs_bf16",
    "device_rel_err_vs_golden",
    "device_rel_err_vs_bf16",
    "device_vs_emulation",
    "image_vs_emulation",
)


def torch_fused_moe_gemm(
    A,
    B,
    C,
    A_scale,
    B_scale,
    topk_weights,
    sorted_token_ids,
    expert_ids,
    num_tokens_post_padded,
    mul_routed_weight,
    top_k,
    config,
    compute_type,
    **kw,
):
    """CPU dry run only: what ``invoke_fused_moe_triton_kernel`` computes for block FP8."""

    block = kw["block_shape"]
    M = config["BLOCK_SIZE_M"]
    n_valid = int(num_tokens_post_padded.reshape(-1)[0])
    numel = topk_weights.numel() if topk_weights is not None else C.shape[0] * C.shape[1]
    Cf = C.view(-1, C.shape[-1])
    for i in range(n_valid):
        tok = int(sorted_token_ids[i])
        if tok >= numel:
            continue
        e = int(expert_ids[i // M])
        row = tok // top_k
        a = A[row].double() * A_scale[row].double().repeat_interleave(block[1])[: A.shape[1]]
        w = (
            B[e].double()
            * B_scale[e]
            .double()
            .repeat_interleave(block[0], 0)[: B.shape[1]]
            .repeat_interleave(block[1], 1)[:, : B.shape[2]]
        )
        acc = (w @ a).float()
        if mul_routed_weight:
            acc = acc * topk_weights.reshape(-1)[tok]
        Cf[tok] = acc.to(C.dtype)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm-site", required=True)
    ap.add_argument("--json")
    ap.add_argument("--shapes", default="smoke,tp8,ep8")
    ap.add_argument(
        "--seeds", type=int, default=8, help="seed sweep of the smoke shape (device noise floor)"
    )
    ap.add_argument("--cpu-dry-run", action="store_true")
    args = ap.parse_args()

    site = Path(args.vllm_site).resolve()
    sys.path[:0] = [str(site), str(REPO / "smoke"), str(HERE)]
    import vllm_torch_ops

    stubbed = [] if args.cpu_dry_run else vllm_torch_ops.stub_compiled_modules(site)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    import importlib.metadata
    import tempfile

    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        # a bare source tree has no dist-info; vLLM's Triton probe calls version("vllm")
        # and, when that raises, disables Triton altogether
        meta_dir = Path(tempfile.mkdtemp(prefix="vllm-dist-")) / "vllm-0.24.0.dist-info"
        meta_dir.mkdir()
        (meta_dir / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.24.0\n")
        sys.path.append(str(meta_dir.parent))
    import torch

    from m3_smoke import checks_numerics as C
    from m3_smoke import golden, numerics
    from m3_smoke.manifest import DEFAULT_THRESHOLDS
    from m3_smoke.vllm_env import mocked_platform, preload_vllm_modules

    dry = args.cpu_dry_run
    if not dry and not torch.cuda.is_available():
        print("error: no CUDA device (use --cpu-dry-run)", file=sys.stderr)
        return 2
    device = "cpu" if dry else "cuda"
    stand_ins = vllm_torch_ops.install(triton_quant=not dry)
    preload_vllm_modules()
    fp8 = torch.float8_e4m3fnuz if dry else torch.float8_e4m3fn
    import vllm

    meta = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": "cpu dry run" if dry else torch.cuda.get_device_name(0),
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__ if not dry else None,
        "vllm": vllm.__version__,
        "fp8_dtype": str(fp8),
        "op_stand_ins": stand_ins,
        "module_stubs": stubbed,
    }
    print(json.dumps(meta))

    def run_ctx():
        if not dry:
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        stack.enter_context(mocked_platform("gfx942"))
        import vllm.model_executor.layers.fused_moe.experts.triton_moe as tm

        stack.enter_context(
            mock.patch.object(tm, "invoke_fused_moe_triton_kernel", torch_fused_moe_gemm)
        )
        stack.enter_context(
            mock.patch("torch.accelerator.empty_cache", lambda: None)
        )  # no accelerator here
        if not hasattr(tm.tl, "bfloat16"):  # no Triton on this host: only names are needed
            import types

            stack.enter_context(
                mock.patch.object(
                    tm, "tl", types.SimpleNamespace(bfloat16="bf16", float16="fp16", float32="fp32")
                )
            )
        return stack

    def select_ctx():
        return None if dry else mocked_platform("gfx942")

    def one(name, over, pad, *, shipped=False, swiglu_fault=None, seed=None):
        params = dict(numerics.M3, **over)
        if seed is not None:
            params["seed"] = seed
        t0 = time.time()
        prob = numerics.make_problem(params, device=device)
        extra = {}
        if shipped:
            doc, gold = golden.load(REPO / "smoke/golden/m3_moe_native_mxfp8.json")
            extra["device_problem_matches_golden_sha"] = (
                numerics.inputs_sha256(prob) == doc["inputs_sha256"]
            )
            if not extra["device_problem_matches_golden_sha"]:  # fall back to the CPU-made problem
                cpu = numerics.make_problem(params)
                assert numerics.inputs_sha256(cpu) == doc["inputs_sha256"], (
                    "problem != golden's problem"
                )
                prob = {
                    k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in cpu.items()
                }
        else:
            gold = numerics.native_mxfp8_emulated(prob).cpu()
        patch = (
            mock.patch("m3_smoke.layer.image_swiglu", lambda: swiglu_fault)
            if swiglu_fault
            else contextlib.nullcontext()
        )
        log: list[str] = []
        with patch:
            m = C.evaluate(
                prob,
                gold,
                fp8_dtype=fp8,
                device=device,
                pad_experts_to=pad,
                select_ctx=select_ctx(),
                run_ctx=run_ctx(),
                log_lines=log,
            )
        m.update(extra)
        conv_mod = sys.modules.get("vllm.model_executor.layers.quantization.utils.mxfp8_block_fp8")
        m["conversion_impl"] = (
            "triton"
            if device == "cuda"
            and conv_mod is not None
            and conv_mod._TRITON_KERNEL is not None
            and not conv_mod._TRITON_FAILED
            else "torch"
        )
        m["gates_failed"] = C.gate(m, DEFAULT_THRESHOLDS)
        m["seconds"] = round(time.time() - t0, 1)
        m["log"] = [
            ln for ln in log if "MXFP8" in ln or "Triton" in ln or "PrepareAndFinalize" in ln
        ]
        row = " ".join(f"{k}={m[k]:.4g}" for k in KEYS if k in m)
        print(
            f"{name}: {row} mismatch={m['device_conversion_mismatch']['total']} "
            f"conversion={m['conversion_impl']} "
            f"kernel={m.get('device_kernel')} swiglu={m['swiglu_image']} {m['device_moe_config']} "
            f"gates_failed={m['gates_failed']} ({m['seconds']} s)",
            flush=True,
        )
        return m

    def safe(name, *a, **kw):
        try:
            return one(name, *a, **kw)
        except Exception as exc:  # keep going: one broken shape must not hide the others
            import traceback

            traceback.print_exc()
            print(f"{name}: ERROR {type(exc).__name__}: {exc}", flush=True)
            return {"error": f"{type(exc).__name__}: {exc}"}

    shapes = DRY if dry else {k: SHAPES[k] for k in args.shapes.split(",")}
    out = {"meta": meta, "shapes": {}, "faults": {}, "seeds": {}}
    for name, (over, pad) in shapes.items():
        out["shapes"][name] = safe(name, over, pad, shipped=(name == "smoke" and not dry))
    over, pad = shapes["smoke"]
    out["faults"]["alpha_1.0"] = safe(
        "fault alpha=1.0 in the image",
        over,
        pad,
        swiglu_fault={"alpha": 1.0, "beta": 1.0, "limit": 7.0},
    )
    for seed in range(1, 1 + (0 if dry else args.seeds)):
        out["seeds"][seed] = safe(f"seed {seed}", over, pad, seed=seed)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
