#!/usr/bin/env python3
"""Benchmark the MXFP8 -> 128x128 block-FP8 load-time conversion (patch 0001).

Imports the conversion module from a patched vLLM tree (``--vllm-site``: the
folder holding the patched ``vllm/``); without it, straight from its source file
``patches/src/vllm/...`` (patch 0001 is generated from that file).

Figures: GB/s processed (weights + scales read, block weights + scales written),
that rate as a fraction of a memory-copy bandwidth measured here (copy counts
read + write), peak extra memory, relative error of the conversion, and the
rounding comparison (pow2 default vs amax/448, amax/224-equivalent FNUZ,
amax/240 FNUZ).

  python bench/bench_convert.py --device cpu                 # E=16, small default
  python bench/bench_convert.py --device cuda --experts 128 16
  python bench/bench_convert.py --device cuda --sweep   # + launch-config sweep

On CUDA every shape also reports the kernel-only time (CUDA events around
back-to-back launches of the kernel, no allocation, no flag read-back) next
to the whole-call wall time, and the fixed per-call cost measured on a tiny
[1,128,128] input (whole call synchronized per call, and back-to-back
launches: the host-side cost of one Triton launch).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
MODULE = "vllm/model_executor/layers/quantization/utils/mxfp8_block_fp8.py"
FN, FNUZ = torch.float8_e4m3fn, torch.float8_e4m3fnuz


def load_module(site: Path):
    path = site / MODULE
    if not path.is_file():
        raise SystemExit(f"error: {path} not found: is {site} a patched vLLM tree?")
    name = "vllm.model_executor.layers.quantization.utils.mxfp8_block_fp8"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def copy_bandwidth(dev, nbytes: int, iters: int) -> float:
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev).fill_(1)
    dst = torch.empty_like(src)
    dst.copy_(src)
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(iters):
        dst.copy_(src)
    sync(dev)
    dt = (time.perf_counter() - t0) / iters
    del src, dst
    return 2 * nbytes / dt / 1e9


def mx_weights(E, N, K, dev, seed):
    """Realistic MXFP8 weights: Gaussian rows with per-row std spread over ~4x,
    OCP MX-quantized (E8M0 = floor(log2(amax)) - 8 + 127)."""
    g = torch.Generator(device=dev).manual_seed(seed)
    w = torch.empty(E, N, K, dtype=FN, device=dev)
    s = torch.empty(E, N, K // 32, dtype=torch.uint8, device=dev)
    for e in range(E):
        std = 0.01 * torch.exp2(torch.rand(N, 1, generator=g, device=dev) * 2 - 1)
        x = torch.randn(N, K, generator=g, device=dev) * std
        gx = x.view(N, K // 32, 32)
        ex = torch.floor(torch.log2(gx.abs().amax(-1).clamp_min(2.0**-120))) - 8
        s[e] = (ex + 127).clamp(0, 254).to(torch.uint8)
        w[e] = (gx / torch.exp2(ex).unsqueeze(-1)).clamp(-448, 448).view(N, K).to(FN)
        del x, gx, ex
    return w, s


def rel_errors(conv, w, s, n_exp, dev):
    """Relative Frobenius error of dequant(block) vs dequant(MXFP8) per rule,
    over the first n_exp experts (float64)."""
    rules = {
        "pow2 FN (default)": (FN, "pow2"),
        "pow2 FNUZ (default)": (FNUZ, "pow2"),
        "amax/448 FN": (FN, "amax"),
        "amax/224 FNUZ (448 + reinterpret)": (FNUZ, "amax"),
    }
    num = {k: 0.0 for k in [*rules, "amax/240 FNUZ (direct)"]}
    den = 0.0
    for e in range(n_exp):
        we, se = w[e : e + 1], s[e : e + 1]
        ref = conv.dequant_mxfp8(we, se)
        den += float(ref.pow(2).sum())
        for key, (dt, rule) in rules.items():
            q, sc = conv.convert_mxfp8_to_block_fp8(we, se, fp8_dtype=dt, rule=rule, impl="torch")
            num[key] += float((conv.dequant_block_fp8(q, sc) - ref).pow(2).sum())
        # amax/240 directly in FNUZ (uses the 0x7F = 240 code), computed here.
        _, N, K = ref.shape
        nt, kt = -(-N // 128), -(-K // 128)
        pad = torch.nn.functional.pad(ref.abs(), (0, kt * 128 - K, 0, nt * 128 - N))
        amax = pad.reshape(1, nt, 128, kt, 128).amax(dim=(2, 4))
        sc = torch.where(amax > 0, amax / 240.0, torch.ones_like(amax)).float()
        scx = sc.double().repeat_interleave(128, 1)[:, :N].repeat_interleave(128, 2)[:, :, :K]
        q = (ref / scx).clamp(-240, 240).float().to(FNUZ)
        num["amax/240 FNUZ (direct)"] += float((conv.dequant_block_fp8(q, sc) - ref).pow(2).sum())
        del ref, pad, scx, q
    return {k: (v / den) ** 0.5 for k, v in num.items()}


def exhaustive_inputs(dev, top):
    """All 256 E4M3FN bytes (NaN bytes replaced by +0 / -0) x every exponent
    shift 0..top: row r holds byte r; in tile column kt the first group carries
    the tile max E8M0 ``top``, the other three ``top - (3*kt + p - 1)``."""
    kt_n = -(-(top + 1) // 3) + 1
    K = 128 * kt_n
    b = torch.arange(256, dtype=torch.int32)
    b = torch.where(b == 0x7F, 0, torch.where(b == 0xFF, 0x80, b)).to(torch.uint8)
    w = b[:, None].expand(256, K).contiguous().view(FN)[None]
    g = torch.arange(K // 32)
    kt, p = g // 4, g % 4
    sh = torch.where(p == 0, 0, (3 * kt + p - 1).clamp(max=top))
    s = (top - sh).to(torch.uint8)[None, None, :].expand(1, 256, K // 32).contiguous()
    return w.to(dev), s.to(dev)


def triton_vs_torch(conv, dev):
    """Byte/scale mismatches of impl='triton' vs impl='torch' on the exhaustive
    inputs (FN top 254, FNUZ top 253, small tops) and ragged random data."""
    cases = [
        (FN, *exhaustive_inputs(dev, 254)),
        (FNUZ, *exhaustive_inputs(dev, 253)),
        (FN, *exhaustive_inputs(dev, 20)),
        (FNUZ, *exhaustive_inputs(dev, 5)),
    ]
    g = torch.Generator(device="cpu").manual_seed(0)
    for N, K in ((200, 352), (128, 4096), (300, 96)):
        w = torch.randint(0, 256, (3, N, K), generator=g, dtype=torch.int32)
        w = torch.where((w & 0x7F) == 0x7F, 0, w).to(torch.uint8).view(FN)
        s = torch.randint(0, 254, (3, N, K // 32), generator=g, dtype=torch.int32)
        s = s.to(torch.uint8)
        for dt in (FN, FNUZ):
            cases.append((dt, w.to(dev), s.to(dev)))
    bad = 0
    n = 0
    for dt, w, s in cases:
        a, sa = conv.convert_mxfp8_to_block_fp8(w, s, fp8_dtype=dt, impl="triton")
        b, sb = conv.convert_mxfp8_to_block_fp8(w, s, fp8_dtype=dt, impl="torch")
        bad += int((a.view(torch.uint8) != b.view(torch.uint8)).sum()) + int((sa != sb).sum())
        n += a.numel()
    return bad, n


SWEEP = [
    dict(sub=128, num_warps=4, hw_fp8=True, stream=False),
    dict(sub=128, num_warps=8, hw_fp8=True, stream=False),
    dict(sub=64, num_warps=4, hw_fp8=True, stream=False),
    dict(sub=64, num_warps=2, hw_fp8=True, stream=False),
    dict(sub=128, num_warps=4, hw_fp8=True, stream=True),
    dict(sub=64, num_warps=4, hw_fp8=True, stream=True),
    dict(sub=128, num_warps=4, hw_fp8=False, stream=False),
    dict(sub=64, num_warps=4, hw_fp8=False, stream=False),
]


def launch_kernel(conv, w, s, out, osc, dt, flag, block=128):
    """Launch the module's Triton kernel alone (no allocation, no read-back): the module's own
    ``_launch_triton``, which ``_convert_triton`` calls."""
    conv._launch_triton(w, s, out, osc, dt, block, flag)


def time_kernel(conv, w, s, dt, iters):
    """Kernel-only seconds per conversion: CUDA events around ``iters``
    back-to-back launches (outputs preallocated, flag word not read)."""
    E, N, K = w.shape
    out = torch.empty(E, N, K, dtype=dt, device=w.device)
    osc = torch.empty(E, -(-N // 128), -(-K // 128), dtype=torch.float32, device=w.device)
    flag = torch.zeros(1, dtype=torch.int32, device=w.device)
    launch_kernel(conv, w, s, out, osc, dt, flag)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(iters):
        launch_kernel(conv, w, s, out, osc, dt, flag)
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1) / iters / 1e3


def fixed_cost(conv, dev, iters=300):
    """Per-call fixed cost on a tiny [1,128,128] input (kernel ~us): whole
    call, synchronized each time ("call"), and back-to-back kernel launches
    ("launch": the host-side cost of one Triton launch, as the GPU idles)."""
    w = torch.zeros(1, 128, 128, dtype=torch.uint8, device=dev).view(FN)
    s = torch.full((1, 128, 4), 127, dtype=torch.uint8, device=dev)
    for _ in range(20):
        conv.convert_mxfp8_to_block_fp8(w, s, fp8_dtype=FNUZ, impl="triton")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        conv.convert_mxfp8_to_block_fp8(w, s, fp8_dtype=FNUZ, impl="triton")
        torch.cuda.synchronize()
    return {
        "call": (time.perf_counter() - t0) / iters,
        "launch": time_kernel(conv, w, s, FNUZ, iters),
    }


def time_convert(conv, w, s, dt, iters, dev):
    q, sc = conv.convert_mxfp8_to_block_fp8(w, s, fp8_dtype=dt, impl="triton")
    del q, sc
    sync(dev)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2 * iters)]
    t0 = time.perf_counter()
    for i in range(iters):
        ev[2 * i].record()
        q, sc = conv.convert_mxfp8_to_block_fp8(w, s, fp8_dtype=dt, impl="triton")
        ev[2 * i + 1].record()
        sync(dev)
        del q, sc
    wall = (time.perf_counter() - t0) / iters
    gpu = sum(ev[2 * i].elapsed_time(ev[2 * i + 1]) for i in range(iters)) / iters / 1e3
    return wall, gpu


def bench_shape(conv, E, N, K, dev, args, label):
    w, s = mx_weights(E, N, K, dev, seed=E * 7 + N)
    nbytes = w.numel() + s.numel() + w.numel() + 4 * E * (-(-N // 128)) * (-(-K // 128))
    res = {"shape": label, "E": E, "N": N, "K": K}
    if args.sweep and dev.type == "cuda":
        default = dict(conv._TRITON_CFG)
        res["sweep"] = []
        for cfg in SWEEP:
            conv._TRITON_CFG.update(cfg)
            try:
                t, tg = time_convert(conv, w, s, FNUZ, args.iters, dev)
                tk = time_kernel(conv, w, s, FNUZ, args.iters)
                bad, _ = triton_vs_torch(conv, dev)
                row = dict(
                    cfg,
                    GBps=round(nbytes / t / 1e9, 1),
                    GBps_events=round(nbytes / tg / 1e9, 1),
                    GBps_kernel=round(nbytes / tk / 1e9, 1),
                    mismatches=bad,
                )
            except Exception as exc:  # compile errors etc.
                row = dict(cfg, error=str(exc)[-300:])
            res["sweep"].append(row)
            print(f"  sweep {label} E={E}: {row}", flush=True)
        conv._TRITON_CFG.clear()
        conv._TRITON_CFG.update(default)
    for dt in (FNUZ, FN):
        kw = dict(fp8_dtype=dt, workspace_bytes=args.workspace_mib * 2**20, impl=args.impl)
        q, sc = conv.convert_mxfp8_to_block_fp8(w, s, **kw)  # warm-up / compile
        out_bytes = q.numel() + sc.numel() * 4
        del q, sc
        sync(dev)
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            q, sc = conv.convert_mxfp8_to_block_fp8(w, s, **kw)
            sync(dev)
            if _ < args.iters - 1:
                del q, sc
        dt_s = (time.perf_counter() - t0) / args.iters
        if dev.type == "cuda":
            peak_extra = torch.cuda.max_memory_allocated() - base - out_bytes
            mem_note = "torch.cuda.max_memory_allocated delta minus the outputs"
        else:
            chunks = conv.plan_chunks(
                E, N, K, kw["workspace_bytes"], conv._TORCH_WS_BYTES_PER_ELEM, 128
            )
            peak_extra = (
                max((e1 - e0) * (n1 - n0) * K for e0, e1, n0, n1 in chunks)
                * conv._TORCH_WS_BYTES_PER_ELEM
            )
            mem_note = "workspace accounting: largest chunk x 7 B/element (torch path)"
        name = "fnuz" if dt == FNUZ else "fn"
        res[name] = {
            "seconds": dt_s,
            "GBps": nbytes / dt_s / 1e9,
            "peak_extra_MiB": peak_extra / 2**20,
            "mem_note": mem_note,
        }
        if dev.type == "cuda" and args.impl != "torch":
            try:
                tk = time_kernel(conv, w, s, dt, args.iters)
                res[name].update(kernel_seconds=tk, kernel_GBps=nbytes / tk / 1e9)
            except Exception as exc:
                res[name]["kernel_error"] = str(exc)[-300:]
        del q, sc
    if dev.type == "cuda":
        # Triton kernel vs torch path: bit-exact on a slice of experts.
        ne = min(E, args.check_experts)
        mism = {}
        for dt in (FNUZ, FN):
            a, sa = conv.convert_mxfp8_to_block_fp8(w[:ne], s[:ne], fp8_dtype=dt, impl="auto")
            b, sb = conv.convert_mxfp8_to_block_fp8(w[:ne], s[:ne], fp8_dtype=dt, impl="torch")
            mism["fnuz" if dt == FNUZ else "fn"] = int(
                (a.view(torch.uint8) != b.view(torch.uint8)).sum()
            ) + int((sa != sb).sum())
        res["auto_vs_torch_mismatches"] = mism
        res["auto_impl"] = "triton" if conv._get_triton_kernel() is not None else "torch"
        # torch path throughput for comparison
        t0 = time.perf_counter()
        q, sc = conv.convert_mxfp8_to_block_fp8(w, s, fp8_dtype=FNUZ, impl="torch")
        sync(dev)
        res["torch_path_GBps"] = nbytes / (time.perf_counter() - t0) / 1e9
        del q, sc
    res["rel_err"] = rel_errors(conv, w, s, min(E, args.err_experts), dev)
    res["rel_err_experts"] = min(E, args.err_experts)
    del w, s
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return res


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--vllm-site", type=Path, help="folder holding the patched vllm/")
    ap.add_argument("--experts", type=int, nargs="+", help="default: cpu 16, cuda 128 16")
    ap.add_argument("--hidden", type=int, default=None, help="default: cpu 1536, cuda 6144")
    ap.add_argument("--intermediate", type=int, default=None, help="default: cpu 768, cuda 3072")
    ap.add_argument("--iters", type=int, default=None)
    ap.add_argument("--workspace-mib", type=int, default=256)
    ap.add_argument("--impl", default="auto", choices=["auto", "torch", "triton"])
    ap.add_argument("--err-experts", type=int, default=None)
    ap.add_argument("--check-experts", type=int, default=16)
    ap.add_argument(
        "--sweep",
        action="store_true",
        help="cuda: also time the Triton launch configurations in SWEEP",
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    cuda = args.device == "cuda"
    args.experts = args.experts or ([128, 16] if cuda else [16])
    H = args.hidden or (6144 if cuda else 1536)
    inter = args.intermediate or (3072 if cuda else 768)
    args.iters = args.iters or (5 if cuda else 2)
    args.err_experts = args.err_experts or (4 if cuda else 2)
    dev = torch.device(args.device)

    site = (args.vllm_site or REPO / "patches" / "src").resolve()
    conv = load_module(site)
    report = {
        "module": str(site / MODULE),
        "device": args.device,
        "device_name": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
    }
    report["copy_GBps"] = copy_bandwidth(dev, (2 << 30) if cuda else (256 << 20), 20 if cuda else 3)
    print(f"module: {report['module']}")
    print(f"device: {report['device_name']}  torch {torch.__version__}")
    print(f"memory-copy bandwidth (read+write): {report['copy_GBps']:.1f} GB/s")
    if cuda:
        try:
            bad, n = triton_vs_torch(conv, dev)
        except Exception as exc:
            bad, n = f"FAILED: {exc}", 0
        report["exhaustive_mismatches"] = bad
        print(
            f"Triton vs torch path, all 256 bytes x shifts 0..254 + ragged random "
            f"data ({n} bytes, FN and FNUZ): {bad} mismatching bytes/scales",
            flush=True,
        )
        try:
            fc = fixed_cost(conv, dev)
            report["fixed_cost_s"] = fc
            print(
                f"fixed per-call cost, tiny [1,128,128] input: whole call "
                f"{fc['call'] * 1e6:.1f} us; back-to-back launches "
                f"{fc['launch'] * 1e6:.1f} us each",
                flush=True,
            )
        except Exception as exc:
            print(f"fixed per-call cost: FAILED: {exc}", flush=True)
    report["results"] = []
    for E in args.experts:
        for label, N, K in (("w13", 2 * inter, H), ("w2", H, inter)):
            r = bench_shape(conv, E, N, K, dev, args, label)
            report["results"].append(r)
            for name in ("fnuz", "fn"):
                x = r[name]
                print(
                    f"E={E:4d} {label} [{E},{N},{K}] -> {name:4s}: {x['seconds'] * 1e3:9.2f} ms"
                    f"  {x['GBps']:8.1f} GB/s  {x['GBps'] / report['copy_GBps'] * 100:5.1f}% of "
                    f"copy  peak extra {x['peak_extra_MiB']:.1f} MiB"
                    + (
                        f"  | kernel only {x['kernel_seconds'] * 1e3:.3f} ms "
                        f"{x['kernel_GBps'] / report['copy_GBps'] * 100:5.1f}%"
                        if "kernel_seconds" in x
                        else ""
                    )
                )
            if cuda:
                print(
                    f"    auto impl={r['auto_impl']} mismatches vs torch path "
                    f"(first {min(E, args.check_experts)} experts): "
                    f"{r['auto_vs_torch_mismatches']}; torch path {r['torch_path_GBps']:.1f} GB/s"
                )
            print(
                f"    rel. error (Frobenius, first {r['rel_err_experts']} experts): "
                + ", ".join(f"{k}: {v:.3e}" for k, v in r["rel_err"].items())
            )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
