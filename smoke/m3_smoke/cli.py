"""``python3 -m m3_smoke run|record-golden``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from m3_smoke import CHECK_NAMES, __version__


def _build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python3 -m m3_smoke", description="m3-image smoke-test suite"
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the checks, write report.json and junit.xml")
    r.add_argument("--manifest", default="/opt/m3-image/manifest.json")
    r.add_argument("--report-dir", required=True)
    r.add_argument("--platform", choices=("auto", "mock"), default="auto")
    r.add_argument(
        "--checks", default=",".join(CHECK_NAMES), help="comma-separated subset (default: all)"
    )
    g = sub.add_parser("record-golden", help="record the native MI355X MXFP8 golden output")
    g.add_argument("--out", required=True)
    g.add_argument(
        "--emulate", action="store_true", help="exact CPU emulation instead of the gfx950 kernel"
    )
    return ap


def _run(args) -> int:
    from m3_smoke.manifest import ManifestError, load_manifest
    from m3_smoke.report import CheckResult, run_check, write_reports

    names = [n.strip() for n in args.checks.split(",") if n.strip()]
    unknown = [n for n in names if n not in CHECK_NAMES]
    if unknown:
        print(f"error: unknown check(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    report_dir = Path(args.report_dir)
    t0 = time.time()
    meta = {"m3_smoke": __version__, "manifest": args.manifest, "platform_mode": args.platform}
    try:
        manifest = load_manifest(args.manifest)
    except ManifestError as exc:
        res = CheckResult("manifest", False, str(exc))
        write_reports(report_dir, [res], meta)
        print(res.line())
        return 2

    from m3_smoke import vllm_env  # noqa: F401  (env defaults before vLLM imports)
    from m3_smoke.checks_backend import (
        check_backend_marker_gfx942,
        check_backend_marker_gfx950,
        check_swiglu_params,
    )
    from m3_smoke.checks_numerics import check_numerics_vs_native
    from m3_smoke.checks_static import (
        check_fingerprints,
        check_tables_installed,
        check_tables_lookup,
    )

    dev = manifest["device_name"]
    table = {
        "fingerprints": lambda: check_fingerprints(manifest),
        "tables_installed": lambda: check_tables_installed(manifest),
        "tables_lookup": lambda: check_tables_lookup(manifest),
        "backend_marker_gfx942": lambda: check_backend_marker_gfx942(args.platform, dev),
        "backend_marker_gfx950": lambda: check_backend_marker_gfx950(args.platform, dev),
        "swiglu_params": lambda: check_swiglu_params(args.platform, dev),
        "numerics_vs_native": lambda: check_numerics_vs_native(manifest, args.platform),
    }
    results = []
    for name in CHECK_NAMES:
        if name not in names:
            continue
        res = run_check(name, table[name])
        print(res.line(), flush=True)
        results.append(res)
    try:
        import torch
        import vllm

        meta.update(
            torch=torch.__version__, vllm=getattr(vllm, "__version__", "?"), hip=torch.version.hip
        )
        meta["gpu_arch"] = vllm_env.real_gpu_arch()
    except Exception:
        pass
    meta["seconds"] = round(time.time() - t0, 2)
    report = write_reports(report_dir, results, meta)
    return 0 if report["passed"] else 1


def _record(args) -> int:
    from m3_smoke.checks_numerics import record_golden

    try:
        doc = record_golden(args.out, emulate=args.emulate)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"wrote {args.out} ({doc['producer']['kind']}, output sha256 "
        f"{doc['output']['sha256'][:16]})"
    )
    return 0


def main(argv=None) -> int:
    import os

    # stdout carries only the PASS/FAIL lines; vLLM's own logging goes to stderr
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    args = _build_parser().parse_args(argv)
    if args.cmd == "run":
        return _run(args)
    return _record(args)
