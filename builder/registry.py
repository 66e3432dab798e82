"""A small OCI distribution client: manifests, config blobs, and the push of the builder's image.

The builder needs the base's *raw* manifest and config (to own the final config and manifest
byte for byte), needs to ask whether a content tag already exists without pulling anything
big, and pushes its own manifest (no engine's compressor in the digest). Docker's engine API
exposes none of this, so we speak the registry API directly: blobs are checked with HEAD,
mounted across repositories of one registry, uploaded from memory (the small delta and the
config) or streamed from another registry chunk by chunk (never through local disk). Credentials
come from
the standard docker config and credential helpers (via docker-py's own resolver) and never
reach a log line or an exception message.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import requests
from docker import auth as docker_auth

from builder.errors import RegistryError
from builder.hashing import sha256_bytes
from builder.reference import DOCKER_HUB, Reference, parse_reference  # noqa: F401 (re-exported)

INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)


@dataclass(frozen=True)
class Manifest:
    digest: str
    media_type: str
    raw: bytes

    @property
    def body(self) -> dict[str, Any]:
        return json.loads(self.raw)


def _is_loopback(registry: str) -> bool:
    host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry
    return host in ("localhost", "::1") or host.startswith("127.")


class RegistryClient:
    def __init__(self, registry: str, *, auth_config: dict | None = None, timeout: float = 30.0):
        self.registry = registry
        self.scheme = "http" if _is_loopback(registry) else "https"
        self.timeout = timeout
        self.session = requests.Session()
        self._token: str | None = None
        self._auth = auth_config if auth_config is not None else self._credentials()

    def _credentials(self) -> dict:
        try:
            config = docker_auth.load_config()
            key = "https://index.docker.io/v1/" if self.registry == DOCKER_HUB else self.registry
            return docker_auth.resolve_authconfig(config, key) or {}
        except Exception as exc:  # a broken credential helper must not leak its output
            raise RegistryError(
                f"{self.registry}: cannot read credentials from the docker config "
                f"({type(exc).__name__})"
            ) from None

    def _basic(self) -> tuple[str, str] | None:
        user, password = self._auth.get("username"), self._auth.get("password")
        return (user, password) if user and password else None

    def _url(self, path: str) -> str:
        return f"{self.scheme}://{self.registry}/v2/{path}"

    def _request(
        self,
        method: str,
        path: str,
        *,
        headers: dict | None = None,
        scope: str = "",
        data=None,
        params: dict | None = None,
        stream: bool = False,
    ) -> requests.Response:
        headers = dict(headers or {})
        url = path if path.startswith(("http://", "https://")) else self._url(path)
        for attempt in range(2):
            if self._token:
                headers["Authorization"] = f"Bearer {self._token}"
            try:
                response = self.session.request(
                    method,
                    url,
                    headers=headers,
                    data=data,
                    params=params,
                    auth=None if self._token else self._basic(),
                    stream=stream,
                    timeout=self.timeout,
                    allow_redirects=True,
                )
            except requests.ConnectionError:
                raise RegistryError(
                    f"{self.registry}: registry is unreachable ({self.scheme}://{self.registry}/v2/)"
                ) from None
            except requests.Timeout:
                raise RegistryError(
                    f"{self.registry}: registry did not answer within {self.timeout:.0f}s"
                ) from None
            if response.status_code == 401 and attempt == 0:
                challenge = response.headers.get("WWW-Authenticate", "")
                if challenge.lower().startswith("bearer"):
                    self._token = self._fetch_token(challenge, scope)
                    continue
                if self._basic() is None:
                    raise RegistryError(
                        f"{self.registry}: authentication required and no credentials are "
                        "configured (docker login)"
                    )
                raise RegistryError(f"{self.registry}: credentials were rejected (HTTP 401)")
            if response.status_code == 401:
                raise RegistryError(f"{self.registry}: credentials were rejected (HTTP 401)")
            return response
        raise AssertionError("unreachable")

    def _fetch_token(self, challenge: str, scope: str) -> str:
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm", None)
        if not realm:
            raise RegistryError(f"{self.registry}: malformed auth challenge")
        if scope:
            params["scope"] = (
                scope.split()
            )  # several scopes (a cross-repository mount) as repeated params
        try:
            response = requests.get(realm, params=params, auth=self._basic(), timeout=self.timeout)
        except requests.RequestException:
            raise RegistryError(f"{self.registry}: token service {realm} is unreachable") from None
        if response.status_code != 200:
            raise RegistryError(
                f"{self.registry}: token service refused the credentials (HTTP "
                f"{response.status_code})"
            )
        body = response.json()
        return body.get("token") or body.get("access_token") or ""

    def get_manifest(self, repository: str, reference: str) -> Manifest | None:
        """The manifest or index at ``reference`` (tag or digest); None when it does not exist."""
        accept = ", ".join(INDEX_TYPES + MANIFEST_TYPES)
        response = self._request(
            "GET",
            f"{repository}/manifests/{reference}",
            headers={"Accept": accept},
            scope=f"repository:{repository}:pull",
        )
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise RegistryError(
                f"{self.registry}/{repository}:{reference}: manifest request failed "
                f"(HTTP {response.status_code})"
            )
        raw = response.content
        digest = "sha256:" + sha256_bytes(raw)
        if reference.startswith("sha256:") and digest != reference:
            raise RegistryError(
                f"{self.registry}/{repository}@{reference}: registry returned a manifest "
                f"whose digest is {digest}"
            )
        media_type = response.headers.get("Content-Type", "").split(";")[0] or json.loads(raw).get(
            "mediaType", ""
        )
        return Manifest(digest=digest, media_type=media_type, raw=raw)

    def get_blob(self, repository: str, digest: str) -> bytes:
        response = self._request(
            "GET", f"{repository}/blobs/{digest}", scope=f"repository:{repository}:pull"
        )
        if response.status_code != 200:
            raise RegistryError(
                f"{self.registry}/{repository}@{digest}: blob request failed (HTTP "
                f"{response.status_code})"
            )
        if "sha256:" + sha256_bytes(response.content) != digest:
            raise RegistryError(
                f"{self.registry}/{repository}@{digest}: blob content does not match its digest"
            )
        return response.content

    def resolve_image(
        self, repository: str, reference: str, platform: str
    ) -> tuple[Manifest, bytes]:
        """Follow an index to ``platform``'s manifest; return (image manifest, raw config bytes)."""
        manifest = self.get_manifest(repository, reference)
        if manifest is None:
            raise RegistryError(
                f"{self.registry}/{repository}: {reference} does not exist in the registry"
            )
        if manifest.media_type in INDEX_TYPES or "manifests" in manifest.body:
            os_name, arch = platform.split("/")
            chosen = [
                m
                for m in manifest.body.get("manifests", [])
                if m.get("platform", {}).get("os") == os_name
                and m.get("platform", {}).get("architecture") == arch
            ]
            if not chosen:
                raise RegistryError(
                    f"{self.registry}/{repository}@{manifest.digest}: no {platform} image in the "
                    "index"
                )
            manifest = self.get_manifest(repository, chosen[0]["digest"])
            if manifest is None:
                raise RegistryError(
                    f"{self.registry}/{repository}: index entry {chosen[0]['digest']} is missing"
                )
        config_digest = manifest.body["config"]["digest"]
        return manifest, self.get_blob(repository, config_digest)

    def put_manifest(self, repository: str, tag: str, raw: bytes, media_type: str) -> str:
        """Store ``raw`` (an image manifest whose blobs the repository already holds) under ``tag``.

        One request: the registry moves the tag atomically or not at all. Returns the digest
        the registry reports, checked against the bytes sent.
        """
        response = self._request(
            "PUT",
            f"{repository}/manifests/{tag}",
            headers={"Content-Type": media_type},
            scope=f"repository:{repository}:pull,push",
            data=raw,
        )
        if response.status_code not in (200, 201):
            raise RegistryError(
                f"{self.registry}/{repository}:{tag}: manifest upload refused "
                f"(HTTP {response.status_code}{_error_code(response)})"
            )
        digest = "sha256:" + sha256_bytes(raw)
        reported = response.headers.get("Docker-Content-Digest")
        if reported and reported != digest:
            raise RegistryError(
                f"{self.registry}/{repository}:{tag}: registry stored digest {reported}, "
                f"sent {digest}"
            )
        return digest

    # -- blobs: what `make push` uploads -----------------------------------------------------------
    def has_blob(self, repository: str, digest: str) -> bool:
        response = self._request(
            "HEAD", f"{repository}/blobs/{digest}", scope=f"repository:{repository}:pull,push"
        )
        if response.status_code in (200, 307):
            return True
        if response.status_code == 404:
            return False
        raise RegistryError(
            f"{self.registry}/{repository}@{digest}: blob check failed (HTTP "
            f"{response.status_code})"
        )

    def _location(self, response: requests.Response) -> str:
        location = response.headers.get("Location", "")
        if not location:
            raise RegistryError(f"{self.registry}: upload session without a Location header")
        return urljoin(f"{self.scheme}://{self.registry}/", location)

    def mount_blob(self, repository: str, digest: str, from_repository: str) -> bool:
        """Cross-repository mount within this registry; False when the registry declines (then
        the caller uploads), True when the blob is now in ``repository``."""
        response = self._request(
            "POST",
            f"{repository}/blobs/uploads/",
            params={"mount": digest, "from": from_repository},
            scope=f"repository:{repository}:pull,push repository:{from_repository}:pull",
        )
        if response.status_code == 201:
            return True
        if response.status_code == 202:  # declined: an upload session was opened instead
            self._request(
                "DELETE", self._location(response), scope=f"repository:{repository}:pull,push"
            )
            return False
        raise RegistryError(
            f"{self.registry}/{repository}@{digest}: mount from {from_repository} failed "
            f"(HTTP {response.status_code}{_error_code(response)})"
        )

    def put_blob(self, repository: str, digest: str, data: bytes | Iterable[bytes]) -> None:
        """Upload a blob: in one request from memory, or streamed (``data`` an iterator) with one
        chunked PATCH; the registry checks the digest when the upload is closed."""
        scope = f"repository:{repository}:pull,push"
        response = self._request("POST", f"{repository}/blobs/uploads/", scope=scope)
        if response.status_code != 202:
            raise RegistryError(
                f"{self.registry}/{repository}: blob upload refused (HTTP {response.status_code}"
                f"{_error_code(response)})"
            )
        location = self._location(response)
        body = data
        if not isinstance(data, (bytes, bytearray)):
            response = self._request(
                "PATCH",
                location,
                scope=scope,
                data=data,
                headers={"Content-Type": "application/octet-stream"},
            )
            if response.status_code != 202:
                raise RegistryError(
                    f"{self.registry}/{repository}@{digest}: blob upload failed "
                    f"(HTTP {response.status_code}{_error_code(response)})"
                )
            location, body = self._location(response), b""
        response = self._request(
            "PUT",
            location,
            scope=scope,
            params={"digest": digest},
            data=body,
            headers={"Content-Type": "application/octet-stream"},
        )
        if response.status_code != 201:
            raise RegistryError(
                f"{self.registry}/{repository}@{digest}: blob upload refused "
                f"(HTTP {response.status_code}{_error_code(response)})"
            )

    def blob_chunks(
        self, repository: str, digest: str, chunk_size: int = 1 << 20
    ) -> Iterator[bytes]:
        """The blob's bytes as a stream of chunks; the digest is checked at the end."""
        response = self._request(
            "GET",
            f"{repository}/blobs/{digest}",
            scope=f"repository:{repository}:pull",
            stream=True,
        )
        if response.status_code != 200:
            raise RegistryError(
                f"{self.registry}/{repository}@{digest}: blob request failed (HTTP "
                f"{response.status_code})"
            )
        hasher = hashlib.sha256()
        with response:
            for chunk in response.iter_content(chunk_size):
                hasher.update(chunk)
                yield chunk
        if "sha256:" + hasher.hexdigest() != digest:
            raise RegistryError(
                f"{self.registry}/{repository}@{digest}: blob content does not match its digest"
            )


def _error_code(response: requests.Response) -> str:
    """`, CODE` from an OCI error body, when there is one (never the request's headers)."""
    try:
        errors = response.json().get("errors") or []
        return f", {errors[0]['code']}" if errors and errors[0].get("code") else ""
    except Exception:
        return ""


def client_for(reference: str, **kwargs) -> tuple[RegistryClient, Reference]:
    ref = parse_reference(reference)
    return RegistryClient(ref.registry, **kwargs), ref
