"""Delivery bench: ``make image`` when the content tag already exists in the registry.

Measures, on this engine, with the base already cached (the node case):
  * wall time of ``python -m builder image`` from "no local image" to a ready, tagged image;
  * bytes the registry served for the image's repository during that run (its access log),
    against the image's total compressed size.

Needs a validated local image of the target (``make image``); pushes it first if the registry
does not hold the content tag yet. Usage:
    python bench/bench_delivery.py [--spec image.yaml] [--target standin] [--registry-log FILE]
The builder run is the one next to the spec (``cwd`` = the spec's folder), so a project copy
benchmarks its own builder.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LOG_LINE = re.compile(
    r'"(?P<method>GET|HEAD) /v2/(?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3}) (?P<bytes>\d+|-)'
)


def builder(spec: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "builder", "--spec", str(spec), *args],
        cwd=spec.parent,
        env={**os.environ, "PYTHONPATH": str(spec.parent)},
        capture_output=True,
        text=True,
    )


def served_bytes(log: Path, offset: int, repository: str) -> tuple[int, int]:
    """(bytes, requests) the registry served for ``repository`` after ``offset`` in its log."""
    total = requests = 0
    with log.open("rb") as f:
        f.seek(offset)
        for raw in f:
            m = LOG_LINE.search(raw.decode(errors="replace"))
            if m and m.group("path").startswith(repository + "/") and m.group("bytes") != "-":
                total += int(m.group("bytes"))
                requests += 1
    return total, requests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=ROOT / "image.yaml")
    parser.add_argument("--target", default="standin")
    parser.add_argument(
        "--registry-log",
        type=Path,
        default=ROOT / "build" / "ci" / "registry-plain.log",
        help="the registry's access log (default: the plain registry's, build/ci/)",
    )
    args = parser.parse_args()
    spec = args.spec.resolve()
    sys.path.insert(0, str(spec.parent))

    from builder.delivery import remote_image
    from builder.engine import Engine
    from builder.registry import parse_reference
    from builder.workflow import check_inputs_against_lock, load_target, local_image

    target = load_target(str(spec), args.target)
    locked = check_inputs_against_lock(target)
    engine = Engine.connect()
    image_id = local_image(engine, locked)
    if image_id is None:
        sys.exit(
            f"bench: no validated {locked.reference} in the engine; run `make image "
            f"TARGET={target.name}` first"
        )
    remote = remote_image(locked.reference)
    if remote is None:
        pushed = builder(spec, "push", "--target", target.name)
        if pushed.returncode != 0:
            sys.exit(f"bench: push failed: {pushed.stderr.strip().splitlines()[-1]}")
        remote = remote_image(locked.reference)
    layers = remote.manifest.body.get("layers", [])
    image_bytes = sum(layer["size"] for layer in layers)
    delta_bytes = layers[-1]["size"] if layers else 0

    for tag in (locked.tag, *target.aliases):
        engine.untag(f"{target.repository}:{tag}")
    engine.remove(image_id)
    engine.remove(f"m3-image-delta/{target.name}:{locked.tag}")
    assert engine.image_id(target.base.reference) is not None, (
        "the base must be cached for this bench"
    )

    offset = args.registry_log.stat().st_size if args.registry_log.is_file() else None
    started = time.monotonic()
    result = builder(spec, "image", "--target", target.name)
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        sys.exit(f"bench: image failed: {result.stderr.strip().splitlines()[-1]}")
    if "(pulled, not built)" not in result.stdout:
        sys.exit(f"bench: image built instead of pulling: {result.stdout.strip()}")
    assert engine.image_id(locked.reference) == image_id

    print(f"image              {locked.reference}")
    print(f"pinned             {remote.pinned}")
    print(
        f"make image (published tag, base cached): {elapsed:.2f}s to a ready, verified, tagged "
        "image"
    )
    print(
        f"image size         {image_bytes} bytes compressed, {len(layers)} layers; delta layer "
        f"{delta_bytes} bytes"
    )
    if offset is not None:
        time.sleep(0.5)  # let the registry flush its log
        served, requests = served_bytes(
            args.registry_log, offset, parse_reference(locked.reference).repository
        )
        print(
            f"transferred        {served} bytes in {requests} registry responses "
            f"({served / max(image_bytes, 1):.4%} of the image)"
        )
    else:
        print(f"transferred        not measured: no registry log at {args.registry_log}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
