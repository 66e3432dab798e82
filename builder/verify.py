"""Check an image (or an unpacked root file system) against a lock before anything runs it.

What is checked, all against the lock alone (no spec, no build):
* labels: every label the builder writes (lock digest, content tag, base, patches, tables...);
* /opt/m3-image/lock.json inside the image: the very lock;
* every file the lock fingerprints (patched modules, installed MoE tables): git blob + sha256
  read out of the image through the archive API (only those files cross the wire);
* /opt/m3-image/manifest.json: the tables and patched-file fingerprints it lists;
* the layers: the base's layers plus exactly one (when the base is in the engine).

A foreign image (other labels), or ours with any fingerprinted file changed (labels kept), is
refused. Problems are listed one per line; the error is one line.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from builder.engine import Engine
from builder.errors import BuilderError
from builder.hashing import git_blob_id, sha256_bytes
from builder.image_layout import LOCK_PATH, MANIFEST_PATH
from builder.lock import Lock, content_tag
from builder.provenance import NS, image_labels

Reader = Callable[[list[str]], dict[str, bytes | None]]


class VerificationFailed(BuilderError):
    """The image does not match the lock: tampered, foreign, or built from other inputs."""


def _short(value, width: int = 80) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def check_labels(labels: dict[str, str], lock: Lock) -> list[str]:
    expected = image_labels(lock, lock.inputs.labels)
    first = (f"{NS}.lock.sha256", f"{NS}.content-tag")  # the identity labels lead the report
    expected = {**{k: expected[k] for k in first}, **expected}
    return [
        f"label {key}: expected {_short(value)}, found {_short(labels.get(key, 'nothing'))}"
        for key, value in expected.items()
        if labels.get(key) != value
    ]


def check_files(read: Reader, lock: Lock) -> list[str]:
    root = PurePosixPath(lock.vllm.root)
    wanted = {str(root / rel): (rel, change.post) for rel, change in (lock.files or {}).items()}
    paths = [*wanted, str(LOCK_PATH), str(MANIFEST_PATH)]
    found = read(paths)
    problems = []
    for path, (rel, post) in wanted.items():
        data = found.get(path)
        if post is None:
            if data is not None:
                problems.append(f"file {rel}: expected absent, found one")
            continue
        if data is None:
            problems.append(f"file {rel}: missing")
        elif git_blob_id(data) != post.git_blob or sha256_bytes(data) != post.sha256:
            problems.append(
                f"file {rel}: sha256 {sha256_bytes(data)[:16]}..., lock says {post.sha256[:16]}..."
            )
    raw_lock = found.get(str(LOCK_PATH))
    if raw_lock is None:
        problems.append(f"{LOCK_PATH}: missing")
    else:
        try:
            if json.loads(raw_lock) != lock.to_doc():
                problems.append(
                    f"{LOCK_PATH}: differs from the lock (content tag "
                    f"{content_tag(json.loads(raw_lock))}, expected {content_tag(lock)})"
                )
        except (ValueError, KeyError, AttributeError, TypeError):
            problems.append(f"{LOCK_PATH}: not a lock")
    raw_manifest = found.get(str(MANIFEST_PATH))
    if raw_manifest is None:
        problems.append(f"{MANIFEST_PATH}: missing")
    else:
        try:
            manifest = json.loads(raw_manifest)
            tables = {t["file"]: t["sha256"] for t in manifest.get("tables", [])}
            want = {t.installs_as.rsplit("/", 1)[-1]: t.sha256 for t in lock.inputs.tables}
            if tables != want:
                problems.append(f"{MANIFEST_PATH}: tables differ from the lock")
            posts = {
                rel: change.post.as_dict()
                for rel, change in (lock.files or {}).items()
                if change.post is not None
            }
            if manifest.get("patched_files") != posts:
                problems.append(f"{MANIFEST_PATH}: patched file fingerprints differ from the lock")
        except (ValueError, KeyError, AttributeError, TypeError):
            problems.append(f"{MANIFEST_PATH}: not a manifest")
    return problems


def check_layers(engine: Engine, image: str, lock: Lock) -> tuple[list[str], bool]:
    """(problems, checked): the image must be the base's layers plus one; skipped without the
    base."""
    base_id = lock.base.config
    names = [n for n in (base_id, lock.base.manifest, lock.base.digest) if n]
    base_layers = None
    for name in names:  # classic stores and Podman: config digest; containerd: manifest
        found = engine.image_id(name)
        if found is not None and found in names:
            base_layers = engine.inspect(name)["RootFS"]["Layers"]
            break
    if not base_id or base_layers is None:
        return [], False
    layers = engine.inspect(image)["RootFS"]["Layers"]
    if layers[: len(base_layers)] != base_layers:
        return [f"layers: not built on the locked base {base_id}"], True
    if len(layers) != len(base_layers) + 1:
        return [
            f"layers: {len(layers) - len(base_layers)} on top of the base, the builder makes "
            "exactly 1"
        ], True
    return [], True


def image_problems(engine: Engine, image: str, lock: Lock) -> tuple[list[str], list[str]]:
    """(problems, notes) for an image in the engine."""
    labels = engine.inspect(image)["Config"].get("Labels") or {}
    problems = check_labels(labels, lock)

    def read(paths: list[str]) -> dict[str, bytes | None]:
        return {
            p: (e.data if e is not None else None)
            for p, e in engine.read_files(image, paths).items()
        }

    problems += check_files(read, lock)
    layer_problems, checked = check_layers(engine, image, lock)
    notes = [] if checked else [f"layers not checked: base {lock.base.config} is not in the engine"]
    return problems + layer_problems, notes


def rootfs_problems(rootfs: Path, lock: Lock) -> list[str]:
    """Problems for an unpacked root file system (e.g. an enroot container); labels are not
    there."""

    def read(paths: list[str]) -> dict[str, bytes | None]:
        out = {}
        for path in paths:
            file = rootfs / path.lstrip("/")
            out[path] = file.read_bytes() if file.is_file() and not file.is_symlink() else None
        return out

    return check_files(read, lock)


def refuse(what: str, problems: list[str], lock_name: str) -> VerificationFailed:
    return VerificationFailed(
        f"{what}: refused: does not match {lock_name} ({problems[0]}"
        f"{f'; {len(problems) - 1} more problem(s)' if len(problems) > 1 else ''})",
        details=problems,
    )


def require_verified(engine: Engine, image: str, lock: Lock, what: str | None = None) -> list[str]:
    """Raise :class:`VerificationFailed` unless ``image`` matches ``lock``; returns notes."""
    problems, notes = image_problems(engine, image, lock)
    if problems:
        raise refuse(what or image, problems, f"the lock for content tag {content_tag(lock)}")
    return notes
