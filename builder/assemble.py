"""Own the final image: config, OCI manifest and load archive; base + one delta layer, no clock.

The classic builder stamps ``created`` times (image and history) into what it produces, so
two builds of the same inputs differ. Like ko, Jib and rules_oci, we instead write the final
config ourselves: the base's raw config (from the registry, verified by digest) with its
history untouched, one history entry and one diff_id appended, labels and env merged, and
``created`` fixed to the base's own creation time. The engine then loads an archive that
holds only that config and the delta layer: the base layers are already in its store. The
OCI manifest is the builder's too (what ``make push`` uploads), so the config digest and the
manifest digest are functions of the lock alone, whatever the engine.
"""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass
from typing import IO

from builder.base import ResolvedBase
from builder.errors import EngineError
from builder.hashing import sha256_bytes
from builder.layer import tar_of


@dataclass(frozen=True)
class Delta:
    layer: bytes  # the uncompressed layer tar (builder.layer's canonical form)
    diff_id: str
    labels: dict[str, str]
    env: list[str]


def _extract(archive: tarfile.TarFile, name: str) -> IO[bytes]:
    member = archive.extractfile(name)
    assert member is not None, name  # docker save writes regular files only
    return member


def read_delta(saved: bytes) -> Delta:
    """Pick the single layer and its config out of ``docker save`` of the delta image."""
    with tarfile.open(fileobj=io.BytesIO(saved)) as archive:
        manifest = json.load(_extract(archive, "manifest.json"))
        if len(manifest) != 1 or len(manifest[0]["Layers"]) != 1:
            raise EngineError("delta image: expected exactly one image with one layer")
        config = json.load(_extract(archive, manifest[0]["Config"]))
        layer = _extract(archive, manifest[0]["Layers"][0]).read()
    diff_id = "sha256:" + sha256_bytes(layer)
    if config["rootfs"]["diff_ids"] != [diff_id]:
        raise EngineError(f"delta image: layer digest {diff_id} does not match its config")
    inner = config.get("config") or {}
    return Delta(
        layer=layer, diff_id=diff_id, labels=inner.get("Labels") or {}, env=inner.get("Env") or []
    )


def _merge_env(base: list[str], ours: list[str]) -> list[str]:
    keys = {item.split("=", 1)[0] for item in ours}
    return [item for item in base if item.split("=", 1)[0] not in keys] + list(ours)


def compose_config(base: ResolvedBase, delta: Delta, history_comment: str) -> bytes:
    config = json.loads(base.raw_config)
    created = base.created
    config["created"] = created
    config.pop("container", None)  # the base's last build container: not this image's
    config.pop("container_config", None)
    inner = config.setdefault("config", {}) or {}
    config["config"] = inner
    inner["Labels"] = {**(inner.get("Labels") or {}), **delta.labels}
    inner["Env"] = _merge_env(inner.get("Env") or [], delta.env)
    config["rootfs"]["diff_ids"] = list(config["rootfs"]["diff_ids"]) + [delta.diff_id]
    config["history"] = list(config.get("history") or []) + [
        {
            "created": created,
            "created_by": (
                "m3-image: patched vLLM files, MI300X MoE tables, smoke suite (one layer)"
            ),
            "comment": history_comment,
        }
    ]
    return json.dumps(config, separators=(",", ":"), ensure_ascii=False).encode()


OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"  # uncompressed: digest == diff_id
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
# Docker schema 2 layer types and their OCI names (same bytes, other label).
_LAYER_TYPES = {
    "application/vnd.docker.image.rootfs.diff.tar.gzip": OCI_LAYER_GZIP,
    OCI_LAYER_GZIP: OCI_LAYER_GZIP,
    OCI_LAYER: OCI_LAYER,
    "application/vnd.oci.image.layer.v1.tar+zstd": "application/vnd.oci.image.layer.v1.tar+zstd",
}


def _json(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def base_layers(base: ResolvedBase) -> list[dict]:
    """The base manifest's layer descriptors in canonical form (mediaType, digest, size only)."""
    layers = []
    for i, layer in enumerate(base.manifest.get("layers") or []):
        media_type = _LAYER_TYPES.get(layer.get("mediaType", ""))
        if media_type is None:
            raise EngineError(
                f"{base.image.reference}: layer {i} has media type {layer.get('mediaType')!r}, "
                "which the builder does not carry into an OCI manifest (foreign or unknown layer)"
            )
        layers.append(
            {"mediaType": media_type, "digest": layer["digest"], "size": int(layer["size"])}
        )
    if len(layers) != len(base.config["rootfs"]["diff_ids"]):
        raise EngineError(
            f"{base.image.reference}: manifest {base.manifest_digest} lists {len(layers)} layers, "
            f"its config {len(base.config['rootfs']['diff_ids'])}"
        )
    return layers


def image_manifest(config: bytes, base: ResolvedBase, delta_digest: str, delta_size: int) -> bytes:
    """The image's OCI manifest, computed by the builder: what is pushed and what nodes pull by.

    Key order and separators are fixed; base layers keep the base registry's (compressed)
    digests, the delta layer is uncompressed, so the digest depends on the inputs alone.
    """
    return _json(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": OCI_CONFIG,
                "digest": "sha256:" + sha256_bytes(config),
                "size": len(config),
            },
            "layers": base_layers(base)
            + [{"mediaType": OCI_LAYER, "digest": delta_digest, "size": delta_size}],
        }
    )


@dataclass(frozen=True)
class BuiltImage:
    """The whole identity of a build: the builder's config, manifest and delta layer."""

    config: bytes
    manifest: bytes
    delta: Delta

    @property
    def config_digest(self) -> str:
        return "sha256:" + sha256_bytes(self.config)

    @property
    def manifest_digest(self) -> str:
        return "sha256:" + sha256_bytes(self.manifest)

    @property
    def diff_ids(self) -> list[str]:
        return list(json.loads(self.config)["rootfs"]["diff_ids"])


def assemble(base: ResolvedBase, delta: Delta, history_comment: str) -> BuiltImage:
    config = compose_config(base, delta, history_comment)
    return BuiltImage(
        config=config,
        manifest=image_manifest(config, base, delta.diff_id, len(delta.layer)),
        delta=delta,
    )


def _blob(digest: str) -> str:
    return "blobs/sha256/" + digest.split(":", 1)[1]


def load_archive(image: BuiltImage) -> bytes:
    """One archive every engine loads: Docker's ``manifest.json`` and an OCI layout side by side.

    Shipped: the config, the delta layer and the OCI manifest. The base layers are referenced
    (``blobs/sha256/<registry digest>``) but not shipped: classic stores find them by chain id,
    the containerd store and Podman by digest, so the (29 GB) base never leaves the engine.
    """
    manifest = json.loads(image.manifest)
    docker_manifest = [
        {
            "Config": _blob(image.config_digest),
            "RepoTags": None,
            "Layers": [_blob(layer["digest"]) for layer in manifest["layers"]],
        }
    ]
    index = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            {
                "mediaType": OCI_MANIFEST,
                "digest": image.manifest_digest,
                "size": len(image.manifest),
            }
        ],
    }
    files = {
        _blob(image.config_digest): image.config,
        _blob(image.delta.diff_id): image.delta.layer,
        _blob(image.manifest_digest): image.manifest,
        "index.json": _json(index),
        "manifest.json": _json(docker_manifest),
        "oci-layout": _json({"imageLayoutVersion": "1.0.0"}),
    }
    return tar_of(sorted(files.items()))
