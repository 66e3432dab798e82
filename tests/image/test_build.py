"""End to end against a real dockerd and registry: lock, build, reproducibility, provenance."""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from pathlib import Path

import pytest
import yaml

from builder.lock import content_digest, content_tag, read_lock

pytestmark = pytest.mark.docker
REPO = Path(__file__).resolve().parents[2]
IMAGE_ID_RE = re.compile(r"^(sha256:[0-9a-f]{64}) \(not validated, not tagged\)$", re.M)


@pytest.fixture(scope="module")
def locked_project(standin_project, docker_client, builder_cli):
    result = builder_cli(standin_project, "lock", "--target", "standin")
    assert result.returncode == 0, result.stderr
    return standin_project


@pytest.fixture(scope="module")
def built(locked_project, builder_cli):
    result = builder_cli(
        locked_project, "image", "--target", "standin", "--rebuild", "--skip-validation"
    )
    assert result.returncode == 0, result.stderr
    match = IMAGE_ID_RE.search(result.stdout)
    assert match, result.stdout
    return match.group(1), result


def test_lock_records_every_input(locked_project, standin_base):
    lock = read_lock(locked_project / "locks/standin.lock.yaml").to_doc()
    assert lock["base"]["digest"] == standin_base.digest
    assert lock["base"]["config"].startswith("sha256:")
    assert [p["file"] for p in lock["inputs"]["patches"]] == [
        f"patches/{line.strip()}"
        for line in (locked_project / "patches/series").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert all(p["upstream"].startswith("vLLM #45726") for p in lock["inputs"]["patches"])
    files = lock["files"]
    assert files["model_executor/layers/fused_moe/oracle/mxfp8.py"]["pre"]["git_blob"].startswith(
        "d0d7c764"
    )
    assert files["model_executor/layers/quantization/utils/mxfp8_block_fp8.py"]["pre"] == "absent"
    table = (
        "model_executor/layers/fused_moe/configs/E=128,N=384,device_name=AMD_Instinct_MI300X,"
        "dtype=fp8_w8a8,block_shape=[128,128].json"
    )
    assert files[table]["pre"]["git_blob"].startswith("c275cecc")
    assert files[table]["post"]["git_blob"].startswith("f20c20c4d2")


def test_build_is_reproducible_on_a_clean_engine(
    locked_project, built, second_engine, docker_client, builder_cli
):
    image_id, _ = built
    engine_b, host_b = second_engine
    result = builder_cli(
        locked_project,
        "image",
        "--target",
        "standin",
        "--skip-validation",
        env={"DOCKER_HOST": host_b},
    )
    assert result.returncode == 0, result.stderr
    assert IMAGE_ID_RE.search(result.stdout).group(1) == image_id
    layers_a = docker_client.api.inspect_image(image_id)["RootFS"]["Layers"]
    layers_b = engine_b.api.inspect_image(image_id)["RootFS"]["Layers"]
    assert layers_a == layers_b


def test_rebuild_after_wipe_gives_the_same_id(locked_project, built, docker_client, builder_cli):
    image_id, _ = built
    lock = read_lock(locked_project / "locks/standin.lock.yaml")
    docker_client.api.remove_image(image_id, force=True)
    assert not docker_client.api.images(
        filters={"reference": f"m3-image-delta/standin:{content_tag(lock)}"}
    )
    result = builder_cli(
        locked_project, "image", "--target", "standin", "--rebuild", "--skip-validation"
    )
    assert result.returncode == 0, result.stderr
    assert IMAGE_ID_RE.search(result.stdout).group(1) == image_id


def test_delta_is_one_small_normalized_layer(locked_project, built, docker_client, standin_base):
    image_id, _ = built
    lock = read_lock(locked_project / "locks/standin.lock.yaml").to_doc()
    base_layers = docker_client.api.inspect_image(standin_base.reference)["RootFS"]["Layers"]
    layers = docker_client.api.inspect_image(image_id)["RootFS"]["Layers"]
    assert layers[:-1] == base_layers and len(layers) == len(base_layers) + 1
    # The builder writes the layer itself (no engine build): its bytes are in build/context/.
    layer = (REPO / "build/context/standin/image/delta.tar").read_bytes()
    assert "sha256:" + hashlib.sha256(layer).hexdigest() == layers[-1]
    assert len(layer) < 1 << 20
    with tarfile.open(fileobj=io.BytesIO(layer)) as inner:
        members = inner.getmembers()
    names = {m.name for m in members if m.isfile()}
    root = "usr/local/lib/python3.11/dist-packages/vllm/"
    assert {root + rel for rel in lock["files"]} <= names
    assert "opt/m3-image/manifest.json" in names and "opt/m3-image/lock.json" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert not [n for n in names if not (n.startswith(root) or n.startswith("opt/m3-image/"))]
    assert {(m.uid, m.gid) for m in members} == {(0, 0)}
    assert len({m.mtime for m in members}) == 1
    # the canonical form (docs/delivery.md): ustar only, permission bits, no owner names, sorted
    assert {(m.uname, m.gname) for m in members} == {("", "")}
    assert {m.mode for m in members} <= {0o644, 0o755} and not [m for m in members if m.pax_headers]
    assert [m.name for m in members] == sorted((m.name for m in members), key=lambda n: n.encode())
    assert {m.mode for m in members if m.isdir()} == {0o755}


def test_labels_record_provenance(locked_project, built, docker_client, standin_base):
    image_id, _ = built
    lock = read_lock(locked_project / "locks/standin.lock.yaml").to_doc()
    labels = docker_client.api.inspect_image(image_id)["Config"]["Labels"]
    assert (
        labels["org.opencontainers.image.base.name"]
        == "127.0.0.1:5000/m3-image/standin-base:vllm-0.24.0"
    )
    assert labels["org.opencontainers.image.base.digest"] == standin_base.digest
    assert labels["org.opencontainers.image.revision"] == "v0.24.0"
    assert labels["io.m3-image.lock.sha256"] == content_digest(lock)
    assert labels["io.m3-image.content-tag"] == content_tag(lock)
    patches = json.loads(labels["io.m3-image.patches"])
    assert [p["sha256"] for p in patches] == [p["sha256"] for p in lock["inputs"]["patches"]]
    assert "vLLM #45726" in labels["io.m3-image.upstream-prs"]


def test_base_history_is_untouched(built, docker_client, standin_base):
    image_id, _ = built
    base_history = docker_client.api.history(standin_base.reference)
    history = docker_client.api.history(image_id)
    assert len(history) == len(base_history) + 1

    def strip(h):
        return {k: h[k] for k in ("Created", "CreatedBy", "Comment", "Size")}

    assert [strip(h) for h in history[1:]] == [strip(h) for h in base_history]
    assert history[0]["Created"] == base_history[0]["Created"]


def test_drifted_input_is_refused_with_a_diff(locked_project, tmp_path, builder_cli):
    patch = sorted((locked_project / "patches").glob("0001-*.patch"))[0]
    original = patch.read_bytes()
    try:
        patch.write_bytes(original.replace(b"\n", b"\n\n", 1))
        result = builder_cli(locked_project, "image", "--target", "standin", "--skip-validation")
    finally:
        patch.write_bytes(original)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "locks/standin.lock.yaml" in errors[0] and "drifted" in errors[0]
    assert re.search(r"^\s+-inputs\.patches\[0\]\.sha256: ", result.stderr, re.M)
    assert re.search(r"^\s+\+inputs\.patches\[0\]\.sha256: ", result.stderr, re.M)


def test_dry_run_prints_the_plan(locked_project, builder_cli):
    result = builder_cli(locked_project, "image", "--target", "standin", "--dry-run")
    assert result.returncode == 0, result.stderr
    lock = read_lock(locked_project / "locks/standin.lock.yaml")
    assert f"127.0.0.1:5000/m3-image/vllm-standin:{content_tag(lock)}" in result.stdout
    assert "patch       patches/0001-" in result.stdout
    assert "steps       check lock -> pull base" in result.stdout


def test_engine_down_is_one_clear_line(locked_project, tmp_path, builder_cli):
    result = builder_cli(
        locked_project,
        "image",
        "--target",
        "standin",
        "--skip-validation",
        env={"DOCKER_HOST": f"unix://{tmp_path}/nope.sock"},
    )
    assert result.returncode == 2
    assert (
        result.stderr.strip().splitlines()[-1].startswith("error: cannot reach the Docker engine")
    )


def test_absent_base_is_refused(locked_project, tmp_path, builder_cli):
    spec = yaml.safe_load((locked_project / "image.yaml").read_text())
    spec["targets"]["standin"]["base"]["digest"] = "sha256:" + "0" * 64
    spec["targets"]["standin"]["lock"] = str(tmp_path / "x.lock.yaml")
    (locked_project / "absent.yaml").write_text(yaml.safe_dump(spec))
    result = builder_cli(locked_project, "lock", "--target", "standin", spec="absent.yaml")
    assert result.returncode == 2
    assert "does not exist in the registry" in result.stderr
    assert not (tmp_path / "x.lock.yaml").exists()


def test_rendered_dockerfile_agrees_with_the_layer(locked_project, built, docker_client):
    """The Dockerfile stays as the readable recipe: built by the engine, it gives the same files,
    modes, labels and env as the layer and config the builder writes (header bytes aside)."""
    from builder.assemble import read_delta
    from builder.engine import Engine

    image_id, _ = built
    context = REPO / "build/context/standin"
    ours = (context / "image/delta.tar").read_bytes()
    tag = f"m3-image-test/dockerfile-agrees:{image_id.split(':')[1][:12]}"
    engine = Engine(docker_client)
    engine.build(context, "Dockerfile", tag)
    try:
        theirs = read_delta(engine.save(tag))
    finally:
        engine.remove(tag)

    def files(layer: bytes) -> dict:
        with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
            return {
                m.name.rstrip("/"): (
                    m.type,
                    m.mode & 0o7777,
                    tar.extractfile(m).read() if m.isfile() else None,
                )
                for m in tar.getmembers()
            }

    assert files(theirs.layer) == files(ours)
    config = docker_client.api.inspect_image(image_id)["Config"]
    assert theirs.labels and {k: config["Labels"][k] for k in theirs.labels} == theirs.labels
    assert set(theirs.env) <= set(config["Env"])
