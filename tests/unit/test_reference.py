"""builder.reference: one grammar for image references, used by the spec and the registry client."""

from __future__ import annotations

import pytest

from builder import registry, spec
from builder.errors import RegistryError
from builder.reference import DOCKER_HUB, REFERENCE_RE, Reference, parse_reference

DIGEST = "sha256:" + "a" * 64


def test_spec_and_registry_use_the_one_grammar():
    assert spec.REFERENCE_RE is REFERENCE_RE
    assert registry.parse_reference is parse_reference and registry.Reference is Reference


@pytest.mark.parametrize(
    "ref, expected",
    [
        ("ubuntu", Reference(DOCKER_HUB, "library/ubuntu", None, None)),
        ("ubuntu:22.04", Reference(DOCKER_HUB, "library/ubuntu", "22.04", None)),
        (
            "docker.io/vllm/vllm-openai-rocm:minimax-m3",
            Reference(DOCKER_HUB, "vllm/vllm-openai-rocm", "minimax-m3", None),
        ),
        (f"127.0.0.1:5000/a/b:t@{DIGEST}", Reference("127.0.0.1:5000", "a/b", "t", DIGEST)),
        (f"localhost:5000/x@{DIGEST}", Reference("localhost:5000", "x", None, DIGEST)),
        (
            "registry.invalid/m3-image/out",
            Reference("registry.invalid", "m3-image/out", None, None),
        ),
        (
            "my-org/img",
            Reference(DOCKER_HUB, "my-org/img", None, None),
        ),  # no '.', ':' or localhost: a path
    ],
)
def test_parse_reference(ref, expected):
    assert parse_reference(ref) == expected


@pytest.mark.parametrize(
    "ref", ["", "UPPER/case", "a//b", "name:bad tag", "name@sha256:short", "-lead", "a:b:c"]
)
def test_an_invalid_reference_is_one_line_naming_it(ref):
    with pytest.raises(RegistryError) as info:
        parse_reference(ref)
    assert str(info.value).startswith(f"{ref!r}: not an image reference") and "\n" not in str(
        info.value
    )
    assert REFERENCE_RE.match(ref) is None
