"""Seconds to compute the compatibility matrix for 11 vLLM releases, cold and warm wheel cache.

Cold: an empty cache directory (every wheel downloaded from PyPI and its sha256 checked while
it streams). Warm: the same command again on that cache (only PyPI's JSON API is asked). Each
is the CLI as a user runs it (``python -m builder matrix ...``), Python start-up included.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SERIES = [
    "patches/series",
    "patches/series.v0.30.0",
    "patches/series.v0.34.0",
    "patches/series.pinned-4a560dd",
]


def run(versions: str, cache: Path, out: Path) -> float:
    cmd = [
        sys.executable,
        "-m",
        "builder",
        "--quiet",
        "matrix",
        versions,
        "--cache-dir",
        str(cache),
        "--output",
        str(out),
        *[a for s in SERIES for a in ("--series", s)],
    ]
    start = time.monotonic()
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    elapsed = time.monotonic() - start
    if result.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed: {result.stderr.strip().splitlines()[-1:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--versions", default="0.24.0..0.32.0", help="11 releases by default")
    parser.add_argument("--warm-runs", type=int, default=3)
    args = parser.parse_args()
    (REPO / "build").mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=REPO / "build", prefix="bench-matrix-"))
    try:
        cold = run(args.versions, scratch / "cache", scratch / "cold.md")
        size = sum(p.stat().st_size for p in (scratch / "cache").rglob("*.whl"))
        count = len(list((scratch / "cache").rglob("*.whl")))
        warm = sorted(
            run(args.versions, scratch / "cache", scratch / "warm.md")
            for _ in range(args.warm_runs)
        )
        same = (scratch / "cold.md").read_bytes() == (scratch / "warm.md").read_bytes()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"matrix {args.versions}: {count} releases x {len(SERIES)} series")
    print(
        f"  cold cache: {cold:.1f} s ({size / 1e6:.0f} MB of wheels downloaded and sha256-checked, "
        f"{size / 1e6 / cold:.0f} MB/s overall)"
    )
    print(
        f"  warm cache: {warm[len(warm) // 2]:.1f} s (median of {len(warm)}: "
        f"{', '.join(f'{w:.1f}' for w in warm)})"
    )
    print(f"  reports identical: {same}")


if __name__ == "__main__":
    main()
