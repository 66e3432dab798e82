"""The stand-in base mirrors the production layout and is what the registry serves."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
import urllib.request
from pathlib import Path

VLLM_ROOT = "/usr/local/lib/python3.11/dist-packages/vllm"
ORACLE = "model_executor/layers/fused_moe/oracle/mxfp8.py"
CACHE_DIR = Path(__file__).resolve().parents[2] / "build" / "cache"  # as the standin_base fixture
ORACLE_BLOB = "d0d7c76481b0a315e9c57810d40394822f62594c"  # git blob id in vLLM 0.24.0
MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
    ]
)


def _manifest(registry: str, name: str, ref: str) -> tuple[str, bytes, str]:
    request = urllib.request.Request(
        f"http://{registry}/v2/{name}/manifests/{ref}", headers={"Accept": MANIFEST_TYPES}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return (
            response.headers["Docker-Content-Digest"],
            response.read(),
            response.headers["Content-Type"],
        )


def test_pushed_digest_is_the_registry_manifest_digest(standin_base, registry):
    assert standin_base.repository == f"{registry}/m3-image/standin-base"
    assert standin_base.reference == f"{standin_base.repository}@{standin_base.digest}"
    name = standin_base.repository.split("/", 1)[1]
    header_digest, body, media_type = _manifest(
        registry, name, standin_base.local_tag.split(":", 1)[1]
    )
    assert header_digest == standin_base.digest
    assert "sha256:" + hashlib.sha256(body).hexdigest() == standin_base.digest
    assert media_type == "application/vnd.docker.distribution.manifest.v2+json"
    # ... and the digest reference resolves to the same manifest.
    by_digest, _, _ = _manifest(registry, name, standin_base.digest)
    assert by_digest == standin_base.digest
    config_digest = json.loads(body)["config"]["digest"]
    assert config_digest == standin_base.image_id


def test_system_python_imports_the_vllm_moe_oracle(docker_client, standin_base):
    script = (
        "import vllm.model_executor.layers.fused_moe.oracle.mxfp8 as m, sys; "
        "print('M3', m.__file__, sys.executable)"
    )
    output = docker_client.containers.run(
        standin_base.reference,
        [standin_base.python, "-c", script],
        remove=True,
        network_disabled=True,
        stderr=False,
    )
    # vLLM logs to stdout as well: keep only our line.
    ours = [line.split()[1:] for line in output.decode().splitlines() if line.startswith("M3 ")]
    assert len(ours) == 1, output.decode()
    module_file, executable = ours[0]
    assert module_file == f"{VLLM_ROOT}/{ORACLE}"
    assert executable == standin_base.python
    assert standin_base.vllm_root == VLLM_ROOT


def test_oracle_source_is_the_pinned_vllm_blob(docker_client, standin_base):
    container = docker_client.containers.create(standin_base.reference, ["true"])
    try:
        chunks, stat = container.get_archive(f"{VLLM_ROOT}/{ORACLE}")
        archive = tarfile.open(fileobj=io.BytesIO(b"".join(chunks)))
        data = archive.extractfile(archive.getmembers()[0]).read()
    finally:
        container.remove(force=True)
    assert stat["name"] == "mxfp8.py"
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert blob == ORACLE_BLOB


def test_second_build_reuses_the_image(docker_client, registry, standin_base):
    from builder.engine import Engine
    from standin.build import build_standin_base

    lines: list[str] = []
    start = time.monotonic()
    again = build_standin_base(
        Engine(docker_client), CACHE_DIR, registry=registry, log=lines.append
    )
    assert time.monotonic() - start < 60
    assert again.digest == standin_base.digest
    assert again.image_id == standin_base.image_id
    assert not {"debootstrap_s", "site_s", "image_build_s"} & set(again.timings)
    assert any("reusing" in line for line in lines)
