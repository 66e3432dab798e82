"""The build context: the delta tree (patched files, tables, smoke suite, manifest) + Dockerfile.

Everything in it is normalized so the layer is a function of content alone: fixed mtimes
(the base's creation time, so a replaced module never matches a stale ``.pyc`` by mtime),
modes 0644/0755, no ``__pycache__``; owners are set to root by COPY.
"""

from __future__ import annotations

import calendar
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import builder
from builder.dockerfile import render_delta_dockerfile
from builder.errors import PatchError
from builder.inputs import SMOKE_DIR, Inputs, smoke_files
from builder.table_names import device_of
from builder.tree import PatchedTree

INSTALL_DIR = PurePosixPath("/opt/m3-image")
MANIFEST_PATH = INSTALL_DIR / "manifest.json"
LOCK_PATH = INSTALL_DIR / "lock.json"
SMOKE_INSTALL = INSTALL_DIR / "smoke"
DEVICE_NAME = "AMD_Instinct_MI300X"
_TABLE_RE = re.compile(r"^E=(\d+),N=(\d+),")


@dataclass(frozen=True)
class BuildContext:
    root: Path
    dockerfile: str          # file name inside root
    delta: Path              # root/delta: the layer's file tree


def epoch_of(created: str) -> int:
    """Seconds since the epoch of an RFC 3339 time such as the base config's ``created``."""
    stamp = created.rstrip("Z").split(".")[0]
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))


def _place(delta: Path, image_path: PurePosixPath, data: bytes, executable: bool = False) -> None:
    out = delta / image_path.relative_to("/")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    out.chmod(0o755 if executable else 0o644)


def smoke_manifest(inputs: Inputs, tree: PatchedTree) -> dict:
    target = inputs.target
    tables = []
    devices = [DEVICE_NAME]
    for table in inputs.tables:
        m = _TABLE_RE.match(table.name)
        # a copy installed for another device of the family (spec: tables_also_for) is checked
        # under that device's name; every other table under the target's device
        device = device_of(table.name) if table.name != table.source.name else None
        device = device or DEVICE_NAME
        if device not in devices:
            devices.append(device)
        tables.append({"file": table.name, "sha256": table.sha256, "device_name": device,
                       "E": int(m.group(1)) if m else None, "N": int(m.group(2)) if m else None})
    goldens = sorted(p for p in (SMOKE_DIR / "golden").glob("*") if p.is_file()) if (SMOKE_DIR / "golden").is_dir() else []
    return {
        "schema": 1,
        "target": target.name,
        "vllm_root": str(target.vllm_root),
        "patched_files": {rel: fp.as_dict() for rel, fp in sorted(tree.post.items()) if fp is not None},
        "tables": tables,
        "device_name": DEVICE_NAME,
        "device_names": devices,
        "golden": str(SMOKE_INSTALL / "golden" / goldens[0].name) if goldens else None,
        "thresholds": {},
    }


def write_context(root: Path, inputs: Inputs, tree: PatchedTree, lock: dict, labels: dict[str, str],
                  base_reference: str, mtime: int) -> BuildContext:
    if root.exists():
        shutil.rmtree(root)
    delta = root / "delta"
    vllm_root = inputs.target.vllm_root
    for rel, fp in sorted(tree.post.items()):
        if fp is None:
            raise PatchError(f"{rel}: the stack deletes this file; a layer cannot delete base files")
        mode = tree.modes.get(rel, 0o644)
        _place(delta, vllm_root / rel, (tree.parent / "vllm" / rel).read_bytes(), executable=bool(mode & 0o111))
    for path in smoke_files():
        _place(delta, SMOKE_INSTALL / path.relative_to(SMOKE_DIR).as_posix(), path.read_bytes())
    _place(delta, MANIFEST_PATH, (json.dumps(smoke_manifest(inputs, tree), indent=2, sort_keys=True) + "\n").encode())
    _place(delta, LOCK_PATH, (json.dumps(lock, indent=2, sort_keys=True) + "\n").encode())
    for dirpath, dirnames, filenames in os.walk(delta):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.utime(os.path.join(dirpath, name), (mtime, mtime))
    for dirpath, _, _ in os.walk(delta, topdown=False):
        os.utime(dirpath, (mtime, mtime))
    dockerfile = render_delta_dockerfile(builder_version=builder.__version__, target=inputs.target.name,
                                         base_reference=base_reference, labels=labels, env=inputs.target.env)
    (root / "Dockerfile").write_text(dockerfile)
    (root / ".dockerignore").write_text("Dockerfile\n.dockerignore\n")
    return BuildContext(root=root, dockerfile="Dockerfile", delta=delta)
