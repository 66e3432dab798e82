"""Own the final image config and load it: base config + one delta layer, no clock involved.

The classic builder stamps ``created`` times (image and history) into what it produces, so
two builds of the same inputs differ. Like ko, Jib and rules_oci, we instead write the final
config ourselves: the base's raw config (from the registry, verified by digest) with its
history untouched, one history entry and one diff_id appended, labels and env merged, and
``created`` fixed to the base's own creation time. The engine then loads an archive that
holds only that config and the delta layer: the base layers are already in its store.
"""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass

from builder.base import ResolvedBase
from builder.errors import EngineError
from builder.hashing import sha256_bytes


@dataclass(frozen=True)
class Delta:
    layer: bytes            # the uncompressed layer tar, as the engine exported it
    diff_id: str
    labels: dict[str, str]
    env: list[str]


def read_delta(saved: bytes) -> Delta:
    """Pick the single layer and its config out of ``docker save`` of the delta image."""
    with tarfile.open(fileobj=io.BytesIO(saved)) as archive:
        manifest = json.load(archive.extractfile("manifest.json"))
        if len(manifest) != 1 or len(manifest[0]["Layers"]) != 1:
            raise EngineError("delta image: expected exactly one image with one layer")
        config = json.load(archive.extractfile(manifest[0]["Config"]))
        layer = archive.extractfile(manifest[0]["Layers"][0]).read()
    diff_id = "sha256:" + sha256_bytes(layer)
    if config["rootfs"]["diff_ids"] != [diff_id]:
        raise EngineError(f"delta image: layer digest {diff_id} does not match its config")
    inner = config.get("config") or {}
    return Delta(layer=layer, diff_id=diff_id, labels=inner.get("Labels") or {}, env=inner.get("Env") or [])


def _merge_env(base: list[str], ours: list[str]) -> list[str]:
    keys = {item.split("=", 1)[0] for item in ours}
    return [item for item in base if item.split("=", 1)[0] not in keys] + list(ours)


def compose_config(base: ResolvedBase, delta: Delta, history_comment: str) -> bytes:
    config = json.loads(base.raw_config)
    created = base.created
    config["created"] = created
    config.pop("container", None)            # the base's last build container: not this image's
    config.pop("container_config", None)
    inner = config.setdefault("config", {}) or {}
    config["config"] = inner
    inner["Labels"] = {**(inner.get("Labels") or {}), **delta.labels}
    inner["Env"] = _merge_env(inner.get("Env") or [], delta.env)
    config["rootfs"]["diff_ids"] = list(config["rootfs"]["diff_ids"]) + [delta.diff_id]
    config["history"] = list(config.get("history") or []) + [{
        "created": created,
        "created_by": "m3-image: patched vLLM files, MI300X MoE tables, smoke suite (one layer)",
        "comment": history_comment,
    }]
    return json.dumps(config, separators=(",", ":"), ensure_ascii=False).encode()


def image_archive(config: bytes, base: ResolvedBase, delta: Delta) -> tuple[bytes, str]:
    """A ``docker load`` archive holding the config and the delta layer; returns (tar, image id).

    The base layers are listed in the manifest but not shipped: the engine finds them in
    its store by chain id and never opens their paths.
    """
    image_id = "sha256:" + sha256_bytes(config)
    base_layers = [f"base/{i}/layer.tar" for i in range(len(base.config["rootfs"]["diff_ids"]))]
    delta_path = f"{delta.diff_id.split(':', 1)[1]}/layer.tar"
    manifest = [{"Config": f"{image_id.split(':', 1)[1]}.json", "RepoTags": None,
                 "Layers": base_layers + [delta_path]}]
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for name, data in ((manifest[0]["Config"], config), (delta_path, delta.layer),
                           ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue(), image_id
