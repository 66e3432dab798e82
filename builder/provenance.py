"""OCI labels that record where an image came from: base, vLLM revision, patches, tables, lock."""

from __future__ import annotations

import json
from collections.abc import Mapping

from builder.lock import Lock, content_digest, content_tag
from builder.table_names import device_of

NS = "io.m3-image"


def image_labels(lock: Lock, extra: Mapping[str, str]) -> dict[str, str]:
    inputs = lock.inputs
    assert lock.base.config is not None  # labels are made for a resolved lock only
    upstream = sorted({p.upstream for p in inputs.patches if p.upstream})
    labels = {
        "org.opencontainers.image.base.name": lock.base.image,
        "org.opencontainers.image.base.digest": lock.base.digest,
        "org.opencontainers.image.revision": lock.vllm.revision,
        "org.opencontainers.image.source": "m3-image",
        "org.opencontainers.image.version": content_tag(lock),
        f"{NS}.target": lock.target,
        f"{NS}.content-tag": content_tag(lock),
        f"{NS}.lock.sha256": content_digest(lock),
        f"{NS}.builder": f"{lock.builder.version} sha256:{lock.builder.sha256}",
        f"{NS}.vllm.version": lock.vllm.version,
        f"{NS}.vllm.root": lock.vllm.root,
        f"{NS}.base.config": lock.base.config,
        f"{NS}.patches": json.dumps(
            [{"file": p.name, "sha256": p.sha256, "upstream": p.upstream} for p in inputs.patches],
            separators=(",", ":"),
        ),
        f"{NS}.tables": json.dumps(
            [{"file": t.name, "sha256": t.sha256} for t in inputs.tables], separators=(",", ":")
        ),
        f"{NS}.upstream-prs": ", ".join(upstream),
    }
    copies = [t for t in inputs.tables if t.installs_as.rsplit("/", 1)[-1] != t.name]
    if copies:
        # tables installed for another device of the family (spec: tables_also_for)
        labels[f"{NS}.tables.copies"] = json.dumps(
            [
                {
                    "file": t.installs_as.rsplit("/", 1)[-1],
                    "sha256": t.sha256,
                    "copy_of": t.name,
                    "measured_on": device_of(t.name) or "unknown",
                }
                for t in copies
            ],
            separators=(",", ":"),
        )
    return {**labels, **extra}
