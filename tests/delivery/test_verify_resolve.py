"""builder verify (real / tampered / foreign image) and builder resolve (digest-pinned
references)."""

from __future__ import annotations

import re

import pytest

from builder.delivery import remote_image
from builder.lock import content_digest

from .conftest import build_image, builder_cli, one_error_line

pytestmark = [pytest.mark.docker, pytest.mark.registry]
MXFP8 = "model_executor/layers/fused_moe/oracle/mxfp8.py"


def test_verify_accepts_the_real_image(plain_project, plain_image):
    result = builder_cli(plain_project, "verify", plain_image, "--target", "standin")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"{plain_image}: verified against {plain_project.lock_file} "
        f"(content tag {plain_project.tag()}, image {plain_image})"
    )


def test_verify_refuses_a_tampered_image(
    plain_project, plain_image, engine, docker_client, tmp_path
):
    lock = plain_project.lock()
    path = f"{lock.vllm.root}/{MXFP8}"
    original = engine.read_files(plain_image, [path])[path].data
    tampered = build_image(
        docker_client,
        tmp_path,
        "m3-delivery-test/tampered:1",
        {path: original + b"\n# harmless-looking change\n"},
        base=plain_image,
    )
    labels = docker_client.api.inspect_image(tampered)["Config"]["Labels"]
    assert (
        labels == docker_client.api.inspect_image(plain_image)["Config"]["Labels"]
    )  # our labels kept
    result = builder_cli(
        plain_project, "verify", "m3-delivery-test/tampered:1", "--target", "standin"
    )
    line = one_error_line(result)
    assert line.startswith(
        f"error: m3-delivery-test/tampered:1: refused: does not match {plain_project.lock_file} "
        f"(file {MXFP8}: sha256 "
    )
    assert re.search(
        r"^  layers: 2 on top of the base, the builder makes exactly 1$", result.stderr, re.M
    )
    engine.remove(tampered)


def test_verify_refuses_a_foreign_image(plain_project, standin_base):
    result = builder_cli(plain_project, "verify", standin_base.reference, "--target", "standin")
    line = one_error_line(result)
    assert line.startswith(
        f"error: {standin_base.reference}: refused: does not match {plain_project.lock_file} "
        f"(label io.m3-image.lock.sha256: expected {content_digest(plain_project.lock())}, "
        "found nothing; "
    )


def resolved(result) -> dict:
    assert result.returncode == 0, result.stderr
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)


def test_resolve_prints_digest_pyxis_form_and_a_digest_cache_key(
    plain_project, plain_image, plain_pushed
):
    digest = remote_image(plain_project.reference()).manifest_digest
    values = resolved(builder_cli(plain_project, "resolve", "--target", "standin"))
    registry, repository = plain_project.repository.split("/", 1)
    assert values["IMAGE"] == f"{plain_project.repository}@{digest}"
    assert values["PYXIS_IMAGE"] == f"{registry}#{repository}@{digest}"
    assert values["ENROOT_URI"] == f"docker://{registry}#{repository}@{digest}"
    assert values["CACHE_KEY"] == f"{repository.rsplit('/', 1)[-1]}+sha256-{digest.split(':')[1]}"
    assert plain_project.tag() not in values["CACHE_KEY"] and "latest" not in values["CACHE_KEY"]
    assert values["IMAGE_ID"] == plain_image
    assert values["CONTENT_TAG"] == plain_project.tag()
    # through a mutable alias: the very same digest-derived key
    by_alias = resolved(builder_cli(plain_project, "resolve", f"{plain_project.repository}:latest"))
    assert by_alias["CACHE_KEY"] == values["CACHE_KEY"] and by_alias["IMAGE"] == values["IMAGE"]


def test_resolve_of_a_missing_tag_is_one_line(plain_project, plain_pushed):
    reference = f"{plain_project.repository}:no-such-tag"
    line = one_error_line(builder_cli(plain_project, "resolve", reference))
    assert (
        line
        == f"error: resolve {reference}: no such tag in the registry; push it first (`make push`)"
    )


def test_pushed_manifest_is_the_builders_and_resolve_checks_it(
    plain_project, plain_image, plain_pushed
):
    """The registry holds the very manifest the builder computed (build/context/<target>/image/)."""
    import hashlib
    import json

    manifest = (plain_project.root / "build/context/standin/image/manifest.json").read_bytes()
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    assert (
        json.loads(manifest)["layers"][-1]["mediaType"] == "application/vnd.oci.image.layer.v1.tar"
    )
    values = resolved(builder_cli(plain_project, "resolve", "--target", "standin"))
    assert (
        values["MANIFEST_DIGEST"]
        == digest
        == remote_image(plain_project.reference()).manifest_digest
    )
    assert values["IMAGE"].endswith("@" + digest)


def test_verify_without_image_checks_the_predicted_registry_copy(
    plain_project, plain_image, plain_pushed
):
    result = builder_cli(plain_project, "verify", "--target", "standin")
    assert result.returncode == 0, result.stderr
    digest = remote_image(plain_project.reference()).manifest_digest
    assert result.stdout.strip() == (
        f"{plain_project.repository}@{digest}: verified against "
        f"{plain_project.lock_file} (content tag {plain_project.tag()}, image {plain_image})"
    )


def test_resolve_refuses_a_copy_the_lock_does_not_predict(
    snapshot, standin_project, registry, engine
):
    """The same image pushed by the engine (its own gzip, its own manifest): labels match, manifest
    digest does not; resolve by the lock refuses it."""
    from tests.delivery.conftest import SESSION

    from .conftest import build_and_release, locked, make_project

    project = locked(
        make_project(
            snapshot,
            standin_project,
            "delivery-engine-pushed",
            f"{registry}/m3-image/delivery-engine-pushed-{SESSION}",
            [],
        )
    )
    image_id, _ = build_and_release(project, engine)
    engine_digest = engine.push(project.repository, project.tag())
    line = one_error_line(builder_cli(project, "resolve", "--target", "standin"))
    assert line.startswith(
        f"error: resolve {project.reference()}: the registry holds manifest {engine_digest}, "
        "the lock predicts sha256:"
    )
    assert line.endswith("not the builder's push, refusing it")
    # and `make push` will not overwrite that content tag
    pushed = builder_cli(project, "push", "--target", "standin")
    assert "a content tag is never overwritten" in one_error_line(pushed)
    engine.untag(project.reference())
