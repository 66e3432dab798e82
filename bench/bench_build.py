"""Build-time figures (printed, never asserted), per engine of the matrix.

Needs the services and the stand-in (`make services standin lock TARGET=standin`); the nested
engines are started by scripts/engines/*.sh (root; `--engines host` measures the host only).
Measures, on each engine:

* incremental build on a cached base: `builder image --rebuild --skip-validation` (resolve,
  read the touched files, patch, write the canonical layer, assemble, load; no validation),
  median of --runs after one warm-up run (which pulls the base into a fresh engine);
* no-op rebuild: `builder image` when the content tag already exists locally (CLI wall time,
  Python start-up included);

and once: the delta layer's bytes (uncompressed, as pushed), the bytes `make push` sends for a
new lock when the base is already in the registry (base layers mounted or skipped), and the
incremental build on a base 1 GiB larger (host engine; equal times mean the build does not
depend on the base's size).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import docker
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from builder.lock import content_tag, read_lock  # noqa: E402
from builder.spec import load_spec  # noqa: E402

FAT_REPO = "127.0.0.1:5000/m3-image/bench-fat-base"


ENGINES = ["host", "docker28-classic", "docker28-containerd", "podman"]


def cli(
    spec: Path, *args: str, env: dict | None = None
) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "builder", "--spec", str(spec), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    elapsed = time.monotonic() - start
    if result.returncode != 0:
        sys.exit(f"bench: builder {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return elapsed, result


def engine_host(name: str) -> str | None:
    if name == "host":
        return os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "engines" / f"{name}.sh")], capture_output=True, text=True
    )
    if result.returncode != 0:
        print(
            f"{name}: not measured "
            f"({result.stderr.strip().splitlines()[-1] if result.stderr.strip() else 'failed'})"
        )
        return None
    return result.stdout.strip().splitlines()[-1]


def incremental(spec: Path, runs: int, env: dict | None = None) -> tuple[float, str]:
    cli(
        spec, "--quiet", "image", "--target", "standin", "--rebuild", "--skip-validation", env=env
    )  # warm-up
    times, image_id = [], ""
    for _ in range(runs):
        elapsed, result = cli(
            spec,
            "--quiet",
            "image",
            "--target",
            "standin",
            "--rebuild",
            "--skip-validation",
            env=env,
        )
        times.append(elapsed)
        image_id = result.stdout.split()[0]
    return statistics.median(times), image_id


def no_op(spec: Path, runs: int, image_id: str, env: dict) -> float:
    from builder.engine import Engine

    target = load_spec(spec).target("standin")
    tag = content_tag(read_lock(target.lock_file))
    engine = Engine(docker.DockerClient(base_url=env["DOCKER_HOST"], timeout=600))
    engine.tag(image_id, target.repository, tag)
    try:
        return statistics.median(
            cli(spec, "--quiet", "image", "--target", "standin", env=env)[0] for _ in range(runs)
        )
    finally:
        engine.untag(f"{target.repository}:{tag}")


def variant_spec(spec: Path, root: Path, **changes) -> Path:
    """A copy of the standin target (own lock) with ``changes`` applied, in ``root``."""
    for name in ("patches", "tuning"):
        shutil.copytree(REPO / name, root / name)
    doc = yaml.safe_load(spec.read_text())
    target = doc["targets"]["standin"]
    if "base" in target and "digest_file" in target["base"]:
        target["base"] = {
            "image": target["base"]["image"],
            "platform": target["base"]["platform"],
            "digest": load_spec(spec).target("standin").base.digest,
        }
    target.update(changes)
    target["lock"] = "variant.lock.yaml"
    doc["targets"] = {"standin": target}
    doc["default_target"] = "standin"
    out = root / "image.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    cli(out, "--quiet", "lock", "--target", "standin")
    return out


def pushed_bytes(spec: Path) -> None:
    """`make push` of a lock the registry has never seen, its base already there: bytes sent."""
    import io

    from builder.delivery import publish
    from builder.engine import Engine
    from builder.log import StepLog
    from builder.workflow import assemble_image, check_inputs_against_lock, load_target

    with tempfile.TemporaryDirectory() as tmp:
        target_doc = yaml.safe_load(spec.read_text())["targets"]["standin"]
        labels = {**(target_doc.get("labels") or {}), "io.m3-image.bench": uuid.uuid4().hex}
        repository = f"127.0.0.1:5000/m3-image/bench-push-{uuid.uuid4().hex[:8]}"
        variant = variant_spec(
            spec, Path(tmp), labels=labels, output={"repository": repository, "aliases": []}
        )
        sys.path.insert(0, tmp)
        locked = check_inputs_against_lock(load_target(str(variant), "standin"))
        log = StepLog(stream=io.StringIO())
        base, image = assemble_image(Engine.connect(), locked, log)
        start = time.monotonic()
        published = publish(repository, locked.tag, [], image, base, log)
        elapsed = time.monotonic() - start
    kinds = sorted(set(published.blobs.values()))
    counts = ", ".join(f"{sum(1 for v in published.blobs.values() if v == k)} {k}" for k in kinds)
    whole = sum(layer["size"] for layer in json.loads(image.manifest)["layers"]) + len(image.config)
    print(
        f"push of a new lock, base already in the registry: {published.uploaded} bytes sent in "
        f"{elapsed:.2f} s ({counts}; the whole image is {whole} bytes)"
    )


def fat_base(client, base_ref: str) -> tuple[str, int]:
    """The stand-in plus a 1 GiB random layer, pushed; returns (digest, size in bytes)."""
    with tempfile.TemporaryDirectory() as ctx:
        Path(ctx, "Dockerfile").write_text(
            f"FROM {base_ref}\nRUN head -c 1073741824 /dev/urandom > /fat.bin\n"
        )
        for _ in client.api.build(path=ctx, tag=f"{FAT_REPO}:1g", rm=True, decode=True):
            pass
    digest = None
    for chunk in client.api.push(FAT_REPO, tag="1g", stream=True, decode=True):
        if "error" in chunk:
            sys.exit(f"bench: push fat base: {chunk['error']}")
        digest = chunk.get("aux", {}).get("Digest", digest)
    size = client.api.inspect_image(f"{FAT_REPO}:1g")["Size"]
    return digest, size


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spec", type=Path, default=REPO / "image.yaml")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help=f"comma-separated subset of {','.join(ENGINES)}",
    )
    parser.add_argument(
        "--skip-fat", action="store_true", help="skip the 1 GiB-larger base comparison"
    )
    args = parser.parse_args()
    client = docker.from_env(timeout=900)
    spec = args.spec.resolve()
    target = load_spec(spec).target("standin")
    base_size = client.api.inspect_image(target.base.reference)["Size"]
    print(f"stand-in base {base_size / 2**30:.2f} GiB; {os.cpu_count()} CPUs")
    for name in args.engines.split(","):
        host = engine_host(name)
        if host is None:
            continue
        env = {"DOCKER_HOST": host}
        from builder.engine import Engine

        describe = Engine(docker.DockerClient(base_url=host, timeout=600)).describe()
        t_inc, image_id = incremental(spec, args.runs, env)
        t_noop = no_op(spec, args.runs, image_id, env)
        print(
            f"{describe}: incremental build {t_inc:.2f} s, no-op rebuild {t_noop:.2f} s "
            f"(medians of {args.runs}, CLI wall time)"
        )
    layer = REPO / "build" / "context" / "standin" / "image" / "delta.tar"
    size = layer.stat().st_size
    print(f"delta layer: {size} bytes ({size / 2**20:.3f} MiB, uncompressed, as pushed)")
    pushed_bytes(spec)

    if not args.skip_fat:
        digest, fat_size = fat_base(client, target.base.reference)
        with tempfile.TemporaryDirectory() as tmp:
            fat_spec = variant_spec(
                spec,
                Path(tmp),
                base={"image": f"{FAT_REPO}:1g", "digest": digest, "platform": "linux/amd64"},
            )
            t_fat, _ = incremental(fat_spec, args.runs)
        print(
            f"incremental build, base {fat_size / 2**30:.2f} GiB (+1 GiB layer): {t_fat:.2f} s "
            f"(median of {args.runs})"
        )


if __name__ == "__main__":
    main()
