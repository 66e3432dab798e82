"""The base image: resolved through the registry (raw manifest and config), present in the
engine."""

from __future__ import annotations

import json
from dataclasses import dataclass

from builder.engine import Engine
from builder.errors import EngineError
from builder.log import StepLog
from builder.registry import client_for
from builder.spec import BaseImage


@dataclass(frozen=True)
class ResolvedBase:
    image: BaseImage
    manifest_digest: str  # the platform manifest the engine runs
    config_digest: str  # sha256 of the raw config (the image id on classic stores and Podman)
    raw_config: bytes  # verbatim, so the final config keeps the base's history untouched
    raw_manifest: bytes = b"{}"  # verbatim platform manifest: its layer descriptors go into ours

    @property
    def config(self) -> dict:
        return json.loads(self.raw_config)

    @property
    def manifest(self) -> dict:
        return json.loads(self.raw_manifest)

    @property
    def created(self) -> str:
        return self.config.get("created", "1970-01-01T00:00:00Z")

    @property
    def engine_names(self) -> list[str]:
        """What an engine may call this image: config digest (classic, Podman), manifest or pinned
        index digest (containerd store), or the pinned reference."""
        return list(
            dict.fromkeys(
                [self.config_digest, self.manifest_digest, self.image.digest, self.image.reference]
            )
        )


def resolve_base(base: BaseImage) -> ResolvedBase:
    client, ref = client_for(base.reference)
    manifest, raw_config = client.resolve_image(ref.repository, base.digest, base.platform)
    return ResolvedBase(
        image=base,
        manifest_digest=manifest.digest,
        config_digest=manifest.body["config"]["digest"],
        raw_config=raw_config,
        raw_manifest=manifest.raw,
    )


def find_base(engine: Engine, resolved: ResolvedBase) -> str | None:
    return engine.find_image(
        resolved.engine_names,
        resolved.config["rootfs"]["diff_ids"],
        config_digest=resolved.config_digest,
    )


def ensure_base_in_engine(engine: Engine, resolved: ResolvedBase, log: StepLog) -> str:
    """Pull the base by digest unless present; check the engine holds exactly the resolved image.

    Engines name images differently (classic store and Podman: config digest; containerd store:
    manifest or index digest), so the base is looked up by every name it may have and accepted
    only when its layers (diff_ids) are the registry config's. Returns the engine's handle.
    """
    handle = find_base(engine, resolved)
    if handle is None:
        log.info(f"pulling {resolved.image.reference}")
        engine.pull(resolved.image.reference, log.progress)
        handle = find_base(engine, resolved)
        if handle is None:
            raise EngineError(
                f"{resolved.image.reference}: pulled, but {engine.describe()} holds no image with "
                f"the registry config's layers (config {resolved.config_digest})"
            )
    else:
        log.info(f"base present in the engine: {resolved.image.reference}")
    return handle
