"""The ported stacks on their CPU stand-ins (Debian + torch CPU + that release's sources from
PyPI): each base is built on the default stand-in base (all its layers reused), the target's
image is built, validated by the same smoke suite inside itself and tagged; without the ported
oracle patch the same release's image is refused by backend_marker_gfx942."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from builder.lock import content_tag, read_lock

pytestmark = pytest.mark.docker
REPO = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO / "build" / "cache"
PORTED = {"standin-v0-30": "0.30.0", "standin-v0-34": "0.34.0"}
CHECKS = [
    "fingerprints",
    "tables_installed",
    "tables_lookup",
    "backend_marker_gfx942",
    "backend_marker_gfx950",
    "swiglu_params",
    "numerics_vs_native",
]


@pytest.fixture(scope="module", params=sorted(PORTED))
def ported(request, docker_client, registry, tmp_path_factory):
    """(target name, stand-in base, project copy whose only target is pinned to that base)."""
    from builder.engine import Engine
    from standin.build import build_standin_base

    name = request.param
    base = build_standin_base(
        Engine(docker_client), CACHE_DIR, registry=registry, version=PORTED[name]
    )
    root = tmp_path_factory.mktemp(name)
    for folder in ("patches", "tuning"):
        shutil.copytree(REPO / folder, root / folder)
    spec = yaml.safe_load((REPO / "image.yaml").read_text())
    target = spec["targets"][name]
    target["base"] = {
        "image": target["base"]["image"],
        "digest": base.digest,
        "platform": "linux/amd64",
    }
    target["lock"] = f"locks/{name}.lock.yaml"
    (root / "image.yaml").write_text(
        yaml.safe_dump(
            {"schema": 1, "default_target": name, "targets": {name: target}}, sort_keys=False
        )
    )
    return name, base, root


def test_base_reuses_the_default_stand_ins_layers(ported, standin_base, docker_client):
    name, base, _ = ported
    layers = docker_client.api.inspect_image(base.image_id)["RootFS"]["Layers"]
    default = docker_client.api.inspect_image(standin_base.image_id)["RootFS"]["Layers"]
    assert layers[: len(default)] == default  # the whole default base, built once, pulled once
    assert len(layers) == len(default) + 4  # - old tree, + extra packages, + its tree, + byte-code
    env = docker_client.containers.run(
        base.image_id,
        ["/usr/bin/python3", "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
        remove=True,
    )
    assert env.decode().strip() == PORTED[name]


def test_ported_image_is_validated_then_tagged(ported, builder_cli, docker_client):
    name, _, root = ported
    locked = builder_cli(root, "lock", "--target", name)
    assert locked.returncode == 0, locked.stderr
    result = builder_cli(root, "image", "--target", name, "--rebuild")
    assert result.returncode == 0, result.stderr[-3000:]
    assert [
        ln.strip() for ln in result.stderr.splitlines() if ln.strip().startswith(("PASS ", "FAIL "))
    ] == [f"PASS {c}" for c in CHECKS]
    lock = read_lock(root / f"locks/{name}.lock.yaml")
    ref, image_id = result.stdout.strip().splitlines()[-1].split()
    assert ref == f"{lock.inputs.output.repository}:{content_tag(lock)}"
    assert content_tag(lock).startswith(PORTED[name] + "-m3-")
    labels = docker_client.api.inspect_image(image_id)["Config"]["Labels"]
    assert labels["io.m3-image.vllm.version"] == PORTED[name]
    copies = json.loads(labels["io.m3-image.tables.copies"])
    assert {(c["file"].split(",")[2], c["measured_on"]) for c in copies} == {
        ("device_name=AMD_Instinct_MI325X", "AMD_Instinct_MI300X")
    }


def test_without_the_ported_oracle_patch_the_image_is_refused(ported, builder_cli, docker_client):
    name, _, root = ported
    series = root / "patches" / f"series.v{PORTED[name]}"
    spec_text = (root / "image.yaml").read_text()
    kept = [ln for ln in series.read_text().splitlines() if "oracle" not in ln]
    series.write_text("\n".join(kept) + "\n")
    try:
        spec = yaml.safe_load(spec_text)
        del spec["targets"][name]["expect"]["model_executor/layers/fused_moe/oracle/mxfp8.py"]
        (root / "image.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
        locked = builder_cli(root, "lock", "--target", name)
        assert locked.returncode == 0, locked.stderr
        result = builder_cli(root, "image", "--target", name, "--rebuild")
    finally:
        shutil.copy2(REPO / "patches" / series.name, series)
        (root / "image.yaml").write_text(spec_text)
    assert result.returncode == 2, result.stderr[-3000:]
    [error] = [ln for ln in result.stderr.splitlines() if ln.startswith("error: ")]
    assert "validation failed" in error and "no tag applied" in error
    failed = set(re.search(r"validation failed \(([^)]*)\)", error).group(1).split(", "))
    assert "backend_marker_gfx942" in failed and "fingerprints" not in failed
