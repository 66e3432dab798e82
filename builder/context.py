"""The build context: the delta tree (patched files, tables, smoke suite, manifest) + Dockerfile.

Everything in it is normalized so the layer is a function of content alone: fixed mtimes
(the base's creation time, so a replaced module never matches a stale ``.pyc`` by mtime),
modes 0644/0755, no ``__pycache__``; owners are set to root by COPY.
"""

from __future__ import annotations

import calendar
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import builder
from builder.dockerfile import render_delta_dockerfile
from builder.errors import PatchError
from builder.image_layout import INSTALL_DIR, LOCK_PATH, MANIFEST_PATH, SMOKE_INSTALL  # noqa: F401 (re-exported)
from builder.inputs import SMOKE_DIR, Inputs, smoke_files
from builder.lock import Lock, lock_json
from builder.manifest import image_manifest
from builder.table_names import device_of
from builder.tree import PatchedTree


@dataclass(frozen=True)
class BuildContext:
    root: Path
    dockerfile: str  # file name inside root
    delta: Path  # root/delta: the layer's file tree


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
    goldens = (
        sorted(p for p in (SMOKE_DIR / "golden").glob("*") if p.is_file())
        if (SMOKE_DIR / "golden").is_dir()
        else []
    )
    # a copy installed for another device of the family (spec: tables_also_for) is checked under
    # that device's name; every other table under the target's device
    copies: dict[str, str] = {}
    for t in inputs.tables:
        device = device_of(t.name)
        if t.name != t.source.name and device:
            copies[t.name] = device
    return image_manifest(
        target=inputs.target.name,
        vllm_root=str(inputs.target.vllm_root),
        patched_files=tree.post,
        tables=[(t.name, t.sha256) for t in inputs.tables],
        golden=str(SMOKE_INSTALL / "golden" / goldens[0].name) if goldens else None,
        table_devices=copies,
    )


def write_context(
    root: Path,
    inputs: Inputs,
    tree: PatchedTree,
    lock: Lock,
    labels: dict[str, str],
    base_reference: str,
    mtime: int,
) -> BuildContext:
    if root.exists():
        shutil.rmtree(root)
    delta = root / "delta"
    vllm_root = inputs.target.vllm_root
    for rel, fp in sorted(tree.post.items()):
        if fp is None:
            raise PatchError(
                f"{rel}: the stack deletes this file; a layer cannot delete base files"
            )
        mode = tree.modes.get(rel, 0o644)
        _place(
            delta,
            vllm_root / rel,
            (tree.parent / "vllm" / rel).read_bytes(),
            executable=bool(mode & 0o111),
        )
    for path in smoke_files():
        _place(delta, SMOKE_INSTALL / path.relative_to(SMOKE_DIR).as_posix(), path.read_bytes())
    _place(
        delta,
        MANIFEST_PATH,
        (json.dumps(smoke_manifest(inputs, tree), indent=2, sort_keys=True) + "\n").encode(),
    )
    _place(delta, LOCK_PATH, lock_json(lock))
    for dirpath, _dirnames, filenames in os.walk(delta):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.utime(os.path.join(dirpath, name), (mtime, mtime))
    for dirpath, _, _ in os.walk(delta, topdown=False):
        os.utime(dirpath, (mtime, mtime))
    dockerfile = render_delta_dockerfile(
        builder_version=builder.__version__,
        target=inputs.target.name,
        base_reference=base_reference,
        labels=labels,
        env=inputs.target.env,
    )
    (root / "Dockerfile").write_text(dockerfile)
    (root / ".dockerignore").write_text("Dockerfile\n.dockerignore\n")
    return BuildContext(root=root, dockerfile="Dockerfile", delta=delta)
