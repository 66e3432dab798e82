"""The base image: resolved through the registry (raw config), present in the engine."""

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
    manifest_digest: str        # the platform manifest the engine runs
    config_digest: str          # sha256 of the raw config == the engine's image id
    raw_config: bytes           # verbatim, so the final config keeps the base's history untouched

    @property
    def config(self) -> dict:
        return json.loads(self.raw_config)

    @property
    def created(self) -> str:
        return self.config.get("created", "1970-01-01T00:00:00Z")


def resolve_base(base: BaseImage) -> ResolvedBase:
    client, ref = client_for(base.reference)
    manifest, raw_config = client.resolve_image(ref.repository, base.digest, base.platform)
    return ResolvedBase(image=base, manifest_digest=manifest.digest,
                        config_digest=manifest.body["config"]["digest"], raw_config=raw_config)


def ensure_base_in_engine(engine: Engine, resolved: ResolvedBase, log: StepLog) -> None:
    """Pull the base by digest unless present; check the engine holds exactly the resolved config."""
    image_id = engine.image_id(resolved.image.reference)
    if image_id is None:
        log.info(f"pulling {resolved.image.reference}")
        image_id = engine.pull(resolved.image.reference, log.progress)
    else:
        log.info(f"base present in the engine: {resolved.image.reference}")
    if image_id != resolved.config_digest:
        raise EngineError(f"{resolved.image.reference}: engine image id {image_id} differs from the registry's "
                          f"config digest {resolved.config_digest}; the engine must use the classic image store")

