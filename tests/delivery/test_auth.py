"""Registry auth from the docker config, against the htpasswd registry; secrets never leak."""

from __future__ import annotations

import base64
import io
import json
import tarfile

import pytest

from builder.delivery import remote_image

from .conftest import PLANTED_SECRET, builder_cli, one_error_line, write_docker_config

pytestmark = [pytest.mark.docker, pytest.mark.registry]


def test_wrong_password_is_one_line_and_pushes_nothing(
    auth_project, auth_built, auth_registry, tmp_path, docker_config_env
):
    wrong = write_docker_config(
        tmp_path / "wrong", {auth_registry.address: (auth_registry.user, "not-the-password")}
    )
    result = builder_cli(auth_project, "push", "--target", "standin", env=wrong)
    line = one_error_line(result)
    assert line == f"error: push {auth_project.reference()}: credentials were rejected (HTTP 401)"
    assert "not-the-password" not in result.stderr + result.stdout
    docker_config_env({auth_registry.address: (auth_registry.user, auth_registry.password)})
    assert remote_image(auth_project.reference()) is None
    assert remote_image(f"{auth_project.repository}:latest") is None


def test_no_credentials_is_one_line(auth_project, auth_built, tmp_path):
    empty = write_docker_config(tmp_path / "empty", {})
    result = builder_cli(auth_project, "push", "--target", "standin", env=empty)
    line = one_error_line(result)
    assert line == (
        f"error: push {auth_project.reference()}: authentication required and no credentials "
        "are configured (docker login)"
    )


def test_push_with_credentials_from_the_docker_config(
    auth_project, auth_built, auth_registry, docker_config_env
):
    image_id, _, env = auth_built
    result = builder_cli(auth_project, "push", "--target", "standin", env=env)
    assert result.returncode == 0, result.stderr
    docker_config_env({auth_registry.address: (auth_registry.user, auth_registry.password)})
    remote = remote_image(auth_project.reference())
    assert f"{auth_project.reference()} {remote.manifest_digest}" in result.stdout
    assert remote.config_digest == image_id
    assert (
        remote_image(f"{auth_project.repository}:latest").manifest_digest == remote.manifest_digest
    )
    for secret in (auth_registry.password, PLANTED_SECRET):
        assert secret not in result.stdout + result.stderr


def test_planted_secret_is_nowhere_in_the_image_or_the_log(
    auth_built, auth_registry, docker_client
):
    image_id, build, _ = auth_built
    secrets = [PLANTED_SECRET, auth_registry.password]
    encoded = [
        base64.b64encode(f"planted-user:{PLANTED_SECRET}".encode()).decode(),
        base64.b64encode(f"{auth_registry.user}:{auth_registry.password}".encode()).decode(),
    ]
    log = build.stdout + build.stderr
    assert "build delta layer" in log  # it is the build's own log
    saved = b"".join(docker_client.api.get_image(image_id))
    history = json.dumps(docker_client.api.history(image_id))
    labels = json.dumps(docker_client.api.inspect_image(image_id)["Config"])
    layers = []
    with tarfile.open(
        fileobj=io.BytesIO(saved)
    ) as archive:  # also look inside each layer, uncompressed
        for member in archive.getmembers():
            if member.isfile() and member.name.endswith("layer.tar"):
                layers.append(archive.extractfile(member).read())
    assert layers
    for needle in secrets + encoded:
        assert needle not in log
        assert needle.encode() not in saved
        assert needle not in history and needle not in labels
        assert not any(needle.encode() in layer for layer in layers)
