"""Image references (``[registry/]repository[:tag][@sha256:...]``): one grammar for the spec and
the registry client."""

from __future__ import annotations

import re
from dataclasses import dataclass

from builder.errors import RegistryError

DOCKER_HUB = "registry-1.docker.io"
TAG_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
TAG_RE = re.compile(rf"^{TAG_PATTERN}$")
# name[:tag][@sha256:...]; registry host may carry a port (only before a '/': ``ubuntu:22`` is a
# tag).
REFERENCE_RE = re.compile(
    r"^(?P<name>[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+(?=/))?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    rf"(?::(?P<tag>{TAG_PATTERN}))?"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


@dataclass(frozen=True)
class Reference:
    registry: str  # host[:port] the API lives on
    repository: str  # path inside the registry
    tag: str | None
    digest: str | None

    @property
    def name(self) -> str:
        host = "docker.io" if self.registry == DOCKER_HUB else self.registry
        return f"{host}/{self.repository}"


def parse_reference(ref: str) -> Reference:
    """Split a reference the way docker does (``ubuntu`` is ``docker.io/library/ubuntu``)."""
    match = REFERENCE_RE.match(ref)
    if match is None:
        raise RegistryError(
            f"{ref!r}: not an image reference (expected [registry/]repository[:tag][@sha256:<64 "
            "hex>])"
        )
    name, tag, digest = match.group("name", "tag", "digest")
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, repository = first, rest
    else:
        registry, repository = DOCKER_HUB, name
    if registry in ("docker.io", "index.docker.io"):
        registry = DOCKER_HUB
    if registry == DOCKER_HUB and "/" not in repository:
        repository = f"library/{repository}"
    return Reference(registry=registry, repository=repository, tag=tag, digest=digest)
