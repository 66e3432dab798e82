"""builder.delivery: what cluster jobs key on, derived from the digest alone (no registry here)."""

from __future__ import annotations

import pytest

from builder.delivery import cache_key, pyxis_image
from builder.errors import RegistryError

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(
    "name, key",
    [
        ("127.0.0.1:5000/m3-image/vllm-standin", f"vllm-standin+sha256-{DIGEST[7:]}"),
        ("docker.io/library/ubuntu", f"ubuntu+sha256-{DIGEST[7:]}"),
        (
            "registry.invalid/m3-image/vllm-openai-rocm-mi300x",
            f"vllm-openai-rocm-mi300x+sha256-{DIGEST[7:]}",
        ),
    ],
)
def test_cache_key_is_the_digest_and_the_last_path_part(name, key):
    assert cache_key(name, DIGEST) == key
    assert "/" not in key and ":" not in key


@pytest.mark.parametrize(
    "digest", ["latest", "sha256:abc", "sha512:" + "0" * 128, "sha256:" + "0" * 63]
)
def test_cache_key_refuses_anything_but_a_sha256_digest(digest):
    with pytest.raises(RegistryError) as info:
        cache_key("127.0.0.1:5000/x/y", digest)
    assert str(info.value) == f"127.0.0.1:5000/x/y: not a sha256 manifest digest: {digest!r}"


def test_pyxis_image_form():
    assert (
        pyxis_image("127.0.0.1:5000/m3-image/out", DIGEST)
        == f"127.0.0.1:5000#m3-image/out@{DIGEST}"
    )
    assert (
        pyxis_image("docker.io/vllm/vllm-openai-rocm", DIGEST) == f"vllm/vllm-openai-rocm@{DIGEST}"
    )
