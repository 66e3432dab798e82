"""The pinned-faithful stand-in base: one layer on the stand-in, the pinned blobs, pushed and
reused."""

from __future__ import annotations

import hashlib
import json
import urllib.request

import pytest

from builder.engine import Engine
from builder.errors import BuilderError
from standin.pinned import LOCAL_TAG, check_image, read_blobs

VLLM_ROOT = "/usr/local/lib/python3.11/dist-packages/vllm"
PINNED = {
    "model_executor/layers/fused_moe/config.py": "0755699d1a4545649e8f5af5de77bbf2c6b24fab",
    "model_executor/layers/fused_moe/oracle/fp8.py": "acbf2cb46ad42927fa344363059fe37a970d132b",
    "model_executor/layers/quantization/modelopt.py": "33c7c7532a0ba823e4e7a23538300a5977a4553e",
    # untouched by the reconstruction: the same bytes as 0.24.0 (and as the pinned revision)
    "model_executor/layers/fused_moe/oracle/mxfp8.py": "d0d7c76481b0a315e9c57810d40394822f62594c",
    "model_executor/layers/quantization/utils/mxfp8_utils.py": (
        "e6063b463284f912f6cd923d9cf65ff9515d56f2"
    ),
}


def _blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_pinned_base_holds_the_pinned_blobs(docker_client, pinned_base):
    found = read_blobs(Engine(docker_client), pinned_base.reference, sorted(PINNED))
    assert {rel: _blob(data) for rel, data in found.items()} == PINNED
    assert pinned_base.vllm_root == VLLM_ROOT


def test_pinned_base_is_one_layer_on_the_standin(docker_client, standin_base, pinned_base):
    below = docker_client.api.inspect_image(standin_base.reference)["RootFS"]["Layers"]
    above = docker_client.api.inspect_image(pinned_base.reference)["RootFS"]["Layers"]
    assert above[:-1] == below and len(above) == len(below) + 1
    history = docker_client.api.history(pinned_base.reference)
    assert (
        sum(
            1
            for entry in history
            if entry["Size"] > 0 and "COPY" in entry["CreatedBy"] and entry["Id"] != "<missing>"
        )
        >= 1
    )
    assert pinned_base.size - standin_base.size < 1 << 20  # three source files


def test_pinned_base_is_pushed_by_digest(registry, pinned_base):
    assert pinned_base.repository == f"{registry}/m3-image/standin-base"
    assert pinned_base.local_tag == LOCAL_TAG == "m3-image/standin-base:vllm-4a560dd"
    request = urllib.request.Request(
        f"http://{registry}/v2/m3-image/standin-base/manifests/vllm-4a560dd",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
        assert response.headers["Docker-Content-Digest"] == pinned_base.digest
    assert "sha256:" + hashlib.sha256(body).hexdigest() == pinned_base.digest
    assert json.loads(body)["config"]["digest"] == pinned_base.image_id


def test_second_build_reuses_the_layer(docker_client, registry, standin_base, pinned_base):
    from standin.pinned import build_pinned_base

    lines: list[str] = []
    again = build_pinned_base(
        Engine(docker_client), standin_base, registry=registry, log=lines.append
    )
    assert (again.digest, again.image_id) == (pinned_base.digest, pinned_base.image_id)
    assert any(
        line.startswith("standin: reusing m3-image/standin-base:vllm-4a560dd") for line in lines
    ), lines
    assert not any("building" in line for line in lines), lines


def test_the_image_check_refuses_the_plain_standin(docker_client, standin_base, pinned_base):
    check_image(Engine(docker_client), pinned_base.reference)  # no error
    with pytest.raises(BuilderError) as info:
        check_image(Engine(docker_client), standin_base.reference)
    assert str(info.value) == (
        f"{standin_base.reference}: model_executor/layers/fused_moe/config.py: "
        "blob d7ad59b46cda6a635ae7a0270c363a5544f68e63, "
        "expected pinned 4a560dd blob 0755699d1a4545649e8f5af5de77bbf2c6b24fab"
    )
