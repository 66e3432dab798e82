"""Build-time figures (printed, never asserted): incremental build, delta bytes, no-op rebuild.

Needs the services and the stand-in (`make services standin lock TARGET=standin`). Measures:

* incremental build on a cached base: `builder image --rebuild --skip-validation` with the
  delta image removed first, so the delta is really rebuilt (median of --runs);
* the same on a base 1 GiB larger (the stand-in plus a 1 GiB random layer, pushed to the
  local registry): equal times mean the build does not depend on the base's size;
* delta layer bytes (uncompressed tar, what the registry stores compressed);
* no-op rebuild: `builder image` when the content tag already exists locally (CLI wall time,
  Python start-up included).
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import docker
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from builder.lock import content_tag, read_lock  # noqa: E402
from builder.spec import load_spec  # noqa: E402

FAT_REPO = "127.0.0.1:5000/m3-image/bench-fat-base"


def cli(spec: Path, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "builder", "--spec", str(spec), *args], cwd=REPO,
                            capture_output=True, text=True)
    elapsed = time.monotonic() - start
    if result.returncode != 0:
        sys.exit(f"bench: builder {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return elapsed, result


def incremental(client, spec: Path, runs: int) -> tuple[float, str]:
    lock_file = load_spec(spec).target("standin").lock_file
    tag = content_tag(read_lock(lock_file))
    times, image_id = [], ""
    for _ in range(runs):
        try:
            client.api.remove_image(f"m3-image-delta/standin:{tag}", force=True)
        except docker.errors.ImageNotFound:
            pass
        elapsed, result = cli(spec, "--quiet", "image", "--target", "standin", "--rebuild", "--skip-validation")
        times.append(elapsed)
        image_id = result.stdout.split()[0]
    return statistics.median(times), image_id


def fat_base(client, base_ref: str) -> tuple[str, int]:
    """The stand-in plus a 1 GiB random layer, pushed; returns (digest, size in bytes)."""
    with tempfile.TemporaryDirectory() as ctx:
        Path(ctx, "Dockerfile").write_text(f"FROM {base_ref}\nRUN head -c 1073741824 /dev/urandom > /fat.bin\n")
        for _ in client.api.build(path=ctx, tag=f"{FAT_REPO}:1g", rm=True, decode=True):
            pass
    digest = None
    for chunk in client.api.push(FAT_REPO, tag="1g", stream=True, decode=True):
        if "error" in chunk:
            sys.exit(f"bench: push fat base: {chunk['error']}")
        digest = chunk.get("aux", {}).get("Digest", digest)
    size = client.api.inspect_image(f"{FAT_REPO}:1g")["Size"]
    return digest, size


def delta_bytes(client, tag: str) -> int:
    saved = b"".join(client.api.get_image(f"m3-image-delta/standin:{tag}"))
    with tarfile.open(fileobj=io.BytesIO(saved)) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))
        return outer.getmember(manifest[0]["Layers"][0]).size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", type=Path, default=REPO / "image.yaml")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-fat", action="store_true", help="skip the 1 GiB-larger base comparison")
    args = parser.parse_args()
    client = docker.from_env(timeout=900)
    spec = args.spec.resolve()
    target = load_spec(spec).target("standin")
    lock = read_lock(target.lock_file)
    tag = content_tag(lock)
    base_size = client.api.inspect_image(target.base.reference)["Size"]

    t_inc, image_id = incremental(client, spec, args.runs)
    size = delta_bytes(client, tag)
    print(f"incremental build, cached base ({base_size / 2**30:.2f} GiB): {t_inc:.2f} s (median of {args.runs})")
    print(f"delta layer: {size} bytes ({size / 2**20:.3f} MiB, uncompressed)")

    client.api.tag(image_id, target.repository, tag)
    noop = [cli(spec, "--quiet", "image", "--target", "standin")[0] for _ in range(args.runs)]
    print(f"no-op rebuild (content tag present): {statistics.median(noop):.2f} s (median of {args.runs}, CLI wall time)")
    client.api.remove_image(f"{target.repository}:{tag}", noprune=True)

    if not args.skip_fat:
        digest, fat_size = fat_base(client, target.base.reference)
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            for name in ("patches", "tuning"):
                shutil.copytree(REPO / name, root / name)
            doc = yaml.safe_load(spec.read_text())
            fat = doc["targets"]["standin"]
            fat["base"] = {"image": f"{FAT_REPO}:1g", "digest": digest, "platform": "linux/amd64"}
            fat["lock"] = "fat.lock.yaml"
            doc["targets"] = {"standin": fat}
            doc["default_target"] = "standin"
            fat_spec = root / "image.yaml"
            fat_spec.write_text(yaml.safe_dump(doc, sort_keys=False))
            cli(fat_spec, "--quiet", "lock", "--target", "standin")
            t_fat, _ = incremental(client, fat_spec, args.runs)
        print(f"incremental build, base {fat_size / 2**30:.2f} GiB (+1 GiB layer): {t_fat:.2f} s (median of {args.runs})")


if __name__ == "__main__":
    main()
