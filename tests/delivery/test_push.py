"""make push / make image against real registries: digests, aliases, pull-instead-of-build,
conflicts."""

from __future__ import annotations

import io
import os
import time
from contextlib import contextmanager

import pytest

from builder.delivery import TagConflict, publish, remote_image
from builder.engine import check_stream
from builder.errors import EngineError, RegistryError
from builder.log import StepLog

from .conftest import (
    SESSION,
    build_image,
    builder_cli,
    free_port,
    one_error_line,
    quiet_log,
    tiny_image,
)

pytestmark = [pytest.mark.docker, pytest.mark.registry]


def test_push_reports_the_digest_the_registry_holds(plain_project, plain_image, plain_pushed):
    reference = plain_project.reference()
    digest_line = [
        line for line in plain_pushed.stdout.splitlines() if line.startswith(reference + " ")
    ]
    assert len(digest_line) == 1, plain_pushed.stdout
    digest = digest_line[0].split()[1]
    assert digest.startswith("sha256:") and len(digest) == 71
    assert f"{plain_project.repository}@{digest}" in plain_pushed.stdout
    remote = remote_image(reference)
    assert remote.manifest_digest == digest
    assert remote.config_digest == plain_image  # the registry copy is our image, byte for byte
    for alias in plain_project.aliases:  # aliases: the very same manifest
        aliased = remote_image(f"{plain_project.repository}:{alias}")
        assert aliased.manifest_digest == digest


def test_push_again_is_a_no_op_with_the_same_digest(plain_project, plain_pushed):
    first = remote_image(plain_project.reference()).manifest_digest
    result = builder_cli(plain_project, "push", "--target", "standin")
    assert result.returncode == 0, result.stderr
    assert f"{plain_project.reference()} {first}" in result.stdout


def test_push_without_validated_image_is_refused(snapshot, standin_project, registry):
    from .conftest import locked, make_project

    project = locked(
        make_project(
            snapshot,
            standin_project,
            "delivery-unbuilt",
            f"{registry}/m3-image/delivery-unbuilt-{SESSION}",
            ["latest"],
        )
    )
    result = builder_cli(project, "push", "--target", "standin")
    line = one_error_line(result)
    assert line.startswith(f"error: push {project.reference()}: no validated image")
    assert remote_image(project.reference()) is None


def test_image_pulls_the_published_tag_instead_of_building(
    plain_project, plain_image, plain_pushed, engine
):
    tag = plain_project.tag()
    delta = f"m3-image-delta/standin:{tag}"
    for ref in (
        plain_project.reference(),
        *(f"{plain_project.repository}:{a}" for a in plain_project.aliases),
    ):
        engine.untag(ref)
    engine.remove(plain_image)
    engine.remove(delta)
    assert engine.image_id(plain_image) is None and engine.image_id(delta) is None
    started = time.monotonic()
    result = builder_cli(plain_project, "image", "--target", "standin")
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    digest = remote_image(plain_project.reference()).manifest_digest
    assert f"pulled {plain_project.repository}@{digest}: image {plain_image}" in result.stderr
    assert f"{plain_project.reference()} {plain_image} (pulled, not built)" in result.stdout
    assert "docker build" not in result.stderr
    assert engine.image_id(delta) is None  # no docker build happened
    assert engine.image_id(plain_project.reference()) == plain_image
    for alias in plain_project.aliases:
        assert engine.image_id(f"{plain_project.repository}:{alias}") == plain_image
    print(f"\nimage from a published content tag: {elapsed:.1f}s")


def test_rebuild_reproduces_the_registry_copy(plain_project, plain_image, plain_pushed):
    result = builder_cli(
        plain_project, "image", "--target", "standin", "--rebuild", "--skip-validation"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == plain_image
    digest = remote_image(plain_project.reference()).manifest_digest
    assert (
        f"reproduced the registry copy: image {plain_image} == config of "
        f"{plain_project.repository}@{digest}"
    ) in result.stderr


def test_image_refuses_a_foreign_image_under_the_content_tag(
    snapshot, standin_project, registry, engine, standin_base
):
    from .conftest import locked, make_project

    project = locked(
        make_project(
            snapshot,
            standin_project,
            "delivery-foreign",
            f"{registry}/m3-image/delivery-foreign-{SESSION}",
            ["latest"],
        )
    )
    engine.tag(standin_base.reference, project.repository, project.tag())  # someone else's image
    pushed = engine.push(project.repository, project.tag())
    engine.untag(project.reference())
    result = builder_cli(project, "image", "--target", "standin")
    line = one_error_line(result)
    assert line.startswith(
        f"error: {project.reference()}: the registry holds {pushed} under this content tag"
    )
    assert "refusing a foreign image under our tag" in line
    assert engine.image_id(f"m3-image-delta/standin:{project.tag()}") is None
    assert engine.image_id(project.reference()) is None


def test_error_inside_the_push_stream_raises(engine, docker_client, tmp_path):
    # The engine answers 200 and reports the failure inside the JSON stream: it must raise.
    with pytest.raises(EngineError) as caught:
        check_stream(
            iter(
                [
                    {"status": "Preparing"},
                    {
                        "errorDetail": {"message": "blob upload invalid"},
                        "error": "blob upload invalid",
                    },
                ]
            ),
            "push r/x:t",
        )
    assert str(caught.value) == "push r/x:t: blob upload invalid"
    port = free_port()
    repository = f"127.0.0.1:{port}/m3-image/nowhere"
    build_image(docker_client, tmp_path, f"{repository}:t", {"/x": b"x"})
    with pytest.raises(EngineError) as caught:
        engine.push(repository, "t")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(
        f"push {repository}:t: the registry is unreachable or went away mid-transfer ("
    )
    assert "connection refused" in message


def test_existing_tag_with_a_different_digest_is_refused(tmp_path, registry):
    repository = f"{registry}/m3-image/delivery-conflict-{SESSION}"
    first, base = tiny_image(tmp_path, {"x": b"first"})
    published = publish(repository, "content", ["latest"], first, base, quiet_log())
    assert published.manifest_digest == first.manifest_digest and not published.no_op
    second, _ = tiny_image(tmp_path, {"x": b"second"})
    assert second.config_digest != first.config_digest
    with pytest.raises(TagConflict) as caught:
        publish(repository, "content", ["latest"], second, base, quiet_log())
    assert str(caught.value) == (
        f"push {repository}:content: the registry already holds this tag as "
        f"{published.manifest_digest} "
        f"(image {first.config_digest}), not image {second.config_digest}; a content tag is never "
        "overwritten"
    )
    assert remote_image(f"{repository}:content").manifest_digest == published.manifest_digest
    assert remote_image(f"{repository}:latest").manifest_digest == published.manifest_digest


def test_same_image_pushed_again_is_a_no_op(tmp_path, registry):
    """A second builder (another engine, another machine) pushing the same lock: same bytes,
    no-op."""
    repository = f"{registry}/m3-image/delivery-again-{SESSION}"
    image, base = tiny_image(tmp_path, {"x": b"same"})
    first = publish(repository, "content", ["latest"], image, base, quiet_log())
    again, _ = tiny_image(tmp_path, {"x": b"same"})  # rebuilt from the same inputs
    assert again.manifest == image.manifest
    second = publish(repository, "content", ["latest"], again, base, quiet_log())
    assert (first.no_op, second.no_op) == (False, True)
    assert first.uploaded == len(image.delta.layer) + len(image.config) + len(image.manifest)
    assert second.uploaded == 0 and second.manifest_digest == first.manifest_digest


def test_registry_down_mid_push_loses_nothing(tmp_path, throwaway_registry):
    repository = f"{throwaway_registry.address}/m3-image/mid-push"
    old, base = tiny_image(tmp_path, {"x": b"v1"})
    before = publish(repository, "v1", ["latest", "stable"], old, base, quiet_log())
    big, _ = tiny_image(tmp_path, {"blob": os.urandom(64 << 20)})

    class KillingLog(StepLog):
        """The registry goes away the moment the upload starts."""

        @contextmanager
        def step(self, title: str):
            if title.startswith(f"push {repository}:v2"):
                throwaway_registry.kill()
            with super().step(title):
                yield

    with pytest.raises((EngineError, RegistryError)) as caught:
        publish(repository, "v2", ["latest", "stable"], big, base, KillingLog(stream=io.StringIO()))
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"push {repository}:v2: "), message
    throwaway_registry.start()
    assert remote_image(f"{repository}:v2") is None
    for alias in ("latest", "stable"):
        assert remote_image(f"{repository}:{alias}").manifest_digest == before.manifest_digest
