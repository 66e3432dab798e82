"""The in-image manifest (``/opt/m3-image/manifest.json``): what the smoke suite checks an image
against.

One producer: the builder writes it into every image from the patched tree (``context``), and
tests write it for vLLM trees on the host with :func:`tree_manifest`. The reader and validator
is the suite's own ``m3_smoke.manifest`` (shipped in the image; it never produces one).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from builder.hashing import Fingerprint, sha256_file
from builder.inputs import CONFIGS_DIR

SCHEMA = 1
DEVICE_NAME = "AMD_Instinct_MI300X"
_TABLE_RE = re.compile(r"^E=(\d+),N=(\d+),")


def image_manifest(
    *,
    target: str,
    vllm_root: str,
    patched_files: Mapping[str, Fingerprint | None],
    tables: Iterable[tuple[str, str]],
    golden: str | None,
    device_name: str = DEVICE_NAME,
    table_devices: Mapping[str, str] | None = None,
) -> dict:
    """The manifest document. ``patched_files``: path under the vLLM root -> post-image (None:
    not in the image, left out); ``tables``: (file name, sha256) as installed in the configs folder;
    ``table_devices``: file name -> the device a table is installed for when that is not
    ``device_name`` (a copy for another device of the family, spec ``tables_also_for``)."""
    table_devices = dict(table_devices or {})
    table_docs = []
    for name, sha256 in tables:
        m = _TABLE_RE.match(name)
        doc = {
            "file": name,
            "sha256": sha256,
            "E": int(m.group(1)) if m else None,
            "N": int(m.group(2)) if m else None,
        }
        if table_devices:
            doc["device_name"] = table_devices.get(name, device_name)
        table_docs.append(doc)
    # Per-table devices only when some table is a family copy: a manifest without copies keeps
    # the earlier bytes (the suite reads a missing device_name as the manifest's device_name).
    family = (
        {"device_names": [device_name] + sorted(set(table_devices.values()) - {device_name})}
        if table_devices
        else {}
    )
    return {
        "schema": SCHEMA,
        "target": target,
        "vllm_root": str(vllm_root),
        "patched_files": {
            rel: fp.as_dict() for rel, fp in sorted(patched_files.items()) if fp is not None
        },
        "tables": table_docs,
        "device_name": device_name,
        **family,
        "golden": golden,
        "thresholds": {},
    }


def tree_manifest(
    vllm_dir: Path,
    patched: Iterable[str],
    table_names: Iterable[str],
    golden: str | Path,
    *,
    vllm_root: str | None = None,
    target: str = "host",
    table_devices: Mapping[str, str] | None = None,
) -> dict:
    """The manifest for a vLLM tree on this host (``vllm_dir``), as the builder would write it:
    ``patched`` relative to ``vllm_dir``, tables by file name in its configs folder. ``vllm_root``
    is the path the suite will see (default: ``vllm_dir`` itself); ``table_devices`` as for
    :func:`image_manifest`."""
    vllm_dir = Path(vllm_dir)
    return image_manifest(
        target=target,
        vllm_root=str(vllm_root or vllm_dir),
        patched_files={rel: Fingerprint.of((vllm_dir / rel).read_bytes()) for rel in patched},
        tables=[(name, sha256_file(vllm_dir / CONFIGS_DIR / name)) for name in table_names],
        golden=str(golden),
        table_devices=table_devices,
    )
