#!/usr/bin/env python3
"""Printed sweep behind the numerics gates (docs/validation.md): for N seeds of the
smoke problem, every metric the `numerics_vs_native` check gates, for correct images
(conversion rule pow2 = shipped, amax = the other correct rule) and for the subtle
faults the gates must catch (one 128x128 tile scale doubled in w13 / in w2, SwiGLU
alpha 1.0 instead of 1.702 inside the image), and whether the gates pass each case.

CPU only; imports the conversion module straight from patches/src and the smoke
suite from smoke/ (no vLLM needed).

  python bench/sweep_numerics.py --seeds 8 [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "smoke"))

from m3_smoke import checks_numerics as C  # noqa: E402
from m3_smoke import numerics  # noqa: E402
from m3_smoke.manifest import DEFAULT_THRESHOLDS  # noqa: E402

SRC = REPO / "patches/src/vllm/model_executor/layers/quantization/utils/mxfp8_block_fp8.py"
FNUZ = torch.float8_e4m3fnuz
CASES = ("pow2", "amax", "tile_x2_w13", "tile_x2_w2", "alpha_1.0")
CORRECT = ("pow2", "amax")


def load_conversion():
    spec = importlib.util.spec_from_file_location("mxfp8_block_fp8_src", SRC)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def convert(mod, prob, rule):
    conv = {}
    for n in ("w13", "w2"):
        conv[n], conv[f"{n}_scale"] = mod.convert_mxfp8_to_block_fp8(
            prob[n], prob[f"{n}_scale"], fp8_dtype=FNUZ, rule=rule
        )
    return conv


def metrics(prob, conv, gold, ref, emu, swiglu=None):
    m = C.weight_errors(prob, conv)
    img = (
        numerics.block_fp8_emulated(prob, conv, FNUZ, swiglu=swiglu)
        if (swiglu or emu is None)
        else emu
    )
    base = emu if emu is not None else img
    m["rel_err_vs_golden"] = numerics.rel_err(img, gold)
    m["rel_err_vs_bf16"] = numerics.rel_err(img, ref)
    m["image_vs_emulation"] = numerics.rel_err(img, base) if swiglu else 0.0
    m["converted_nonfinite"] = int((~torch.isfinite(img.float())).sum())
    return m, img


def run_seed(mod, seed):
    prob = numerics.make_problem(dict(numerics.M3, seed=seed))
    gold = numerics.native_mxfp8_emulated(prob)
    ref = numerics.bf16_reference(prob)
    out = {}
    pow2 = convert(mod, prob, "pow2")
    out["pow2"], emu = metrics(prob, pow2, gold, ref, None)
    out["amax"], _ = metrics(prob, convert(mod, prob, "amax"), gold, ref, None)
    for n in ("w13", "w2"):
        bad = dict(pow2)
        bad[f"{n}_scale"] = pow2[f"{n}_scale"].clone()
        bad[f"{n}_scale"][0, 0, 0] *= 2  # expert 0, tile [0, 0]
        out[f"tile_x2_{n}"], _ = metrics(prob, bad, gold, ref, None)
    p = prob["params"]
    out["alpha_1.0"], _ = metrics(
        prob, pow2, gold, ref, emu, swiglu={"alpha": 1.0, "beta": p["beta"], "limit": p["limit"]}
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    mod = load_conversion()
    keys = [
        "rel_err_weights",
        "max_tile_rel_err_weights",
        "rel_err_vs_golden",
        "rel_err_vs_bf16",
        "image_vs_emulation",
    ]
    print(f"thresholds: {DEFAULT_THRESHOLDS}")
    print(f"{'seed':>4} {'case':<12} " + " ".join(f"{k:>24}" for k in keys) + "  gates")
    allres = {}
    wrong = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        t0 = time.time()
        res = run_seed(mod, seed)
        allres[seed] = res
        for case in CASES:
            m = res[case]
            bad = C.gate(m, DEFAULT_THRESHOLDS)
            verdict = "pass" if not bad else "FAIL " + "; ".join(b.split(" (worst")[0] for b in bad)
            if (case in CORRECT) == bool(bad):
                wrong.append((seed, case))
            print(
                f"{seed:>4} {case:<12} "
                + " ".join(f"{m[k]:>24.4g}" for k in keys)
                + f"  {verdict}",
                flush=True,
            )
        print(f"     ({time.time() - t0:.0f} s)", flush=True)
    for case in CASES:
        for k in keys:
            vals = [allres[s][case][k] for s in allres]
            print(f"range {case:<12} {k:<26} {min(vals):.4g} - {max(vals):.4g}")
    print(f"misclassified (correct image failed / fault passed): {wrong or 'none'}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({str(s): r for s, r in allres.items()}, indent=1, default=str)
        )
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
