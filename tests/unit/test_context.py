"""builder.context: the build context is a function of content alone (fixed mtimes, modes, no
caches)."""

from __future__ import annotations

import json
import os
import stat

import pytest
from lockfixture import FIXED_BUILDER_VERSION, TABLE_REL, fixed_base, fixed_inputs

import builder
from builder.context import epoch_of, write_context
from builder.errors import PatchError
from builder.hashing import Fingerprint
from builder.inputs import smoke_files
from builder.lock import compute_lock, lock_json
from builder.tree import PatchedTree

VLLM = "usr/lib/python3/dist-packages/vllm"
FILES = {"a.py": b"a = 1\n", "new.py": b"#!/usr/bin/env python3\n", TABLE_REL: b"{}\n"}


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.setattr(builder, "__version__", FIXED_BUILDER_VERSION)
    parent = tmp_path / "tree"
    for rel, data in FILES.items():
        (parent / "vllm" / rel).parent.mkdir(parents=True, exist_ok=True)
        (parent / "vllm" / rel).write_bytes(data)
        os.utime(parent / "vllm" / rel, (1, 1))
    return PatchedTree(
        parent=parent,
        pre={rel: None for rel in FILES},
        post={rel: Fingerprint.of(data) for rel, data in FILES.items()},
        modes={"a.py": 0o600, "new.py": 0o775},
        outcomes=(),
    )


def test_epoch_of_rfc3339():
    assert epoch_of("1970-01-01T00:00:00Z") == 0
    assert epoch_of("2025-01-02T03:04:05.123456789Z") == 1735787045


def test_context_is_normalized(tmp_path, tree):
    lock = compute_lock(fixed_inputs(), fixed_base(), tree)
    mtime = epoch_of("2025-01-02T03:04:05Z")
    ctx = write_context(
        tmp_path / "ctx",
        fixed_inputs(),
        tree,
        lock,
        {"org.x": "1"},
        base_reference="127.0.0.1:5000/m3/base@sha256:" + "a" * 64,
        mtime=mtime,
    )
    entries = {p.relative_to(ctx.delta).as_posix(): p for p in ctx.delta.rglob("*")}
    files = {rel: p for rel, p in entries.items() if p.is_file()}
    assert {f"{VLLM}/{rel}" for rel in FILES} <= set(files)
    assert {"opt/m3-image/manifest.json", "opt/m3-image/lock.json"} <= set(files)
    assert len([r for r in files if r.startswith("opt/m3-image/smoke/")]) == len(smoke_files())
    assert not [r for r in entries if "__pycache__" in r or r.endswith(".pyc")]
    assert {p.stat().st_mtime for p in entries.values()} == {mtime}
    modes = {rel: stat.S_IMODE(p.stat().st_mode) for rel, p in entries.items()}
    assert modes[f"{VLLM}/a.py"] == 0o644 and modes[f"{VLLM}/new.py"] == 0o755
    assert {modes[r] for r, p in entries.items() if p.is_dir()} == {0o755}
    assert files["opt/m3-image/lock.json"].read_bytes() == lock_json(lock)
    manifest = json.loads(files["opt/m3-image/manifest.json"].read_text())
    assert manifest["patched_files"]["a.py"] == Fingerprint.of(b"a = 1\n").as_dict()
    dockerfile = (ctx.root / ctx.dockerfile).read_text()
    assert 'LABEL org.x="1"' in dockerfile
    assert (ctx.root / ".dockerignore").read_text() == "Dockerfile\n.dockerignore\n"


def test_the_same_inputs_give_the_same_context_bytes(tmp_path, tree):
    lock = compute_lock(fixed_inputs(), fixed_base(), tree)

    def render(where):
        ctx = write_context(
            where, fixed_inputs(), tree, lock, {}, base_reference="b@sha256:" + "a" * 64, mtime=5
        )
        # bytes of everything; mtimes of the layer's tree (Dockerfile and .dockerignore are not in
        # it)
        return {
            p.relative_to(where).as_posix(): (
                p.read_bytes() if p.is_file() else None,
                p.stat().st_mtime if p.is_relative_to(ctx.delta) else None,
            )
            for p in sorted(where.rglob("*"))
        }

    assert render(tmp_path / "one") == render(tmp_path / "two")


def test_a_file_the_stack_deletes_is_refused(tmp_path, tree):
    gone = PatchedTree(
        parent=tree.parent, pre=tree.pre, post={**tree.post, "new.py": None}, modes={}, outcomes=()
    )
    lock = compute_lock(fixed_inputs(), fixed_base(), gone)
    with pytest.raises(PatchError, match="new.py: the stack deletes this file"):
        write_context(tmp_path / "ctx", fixed_inputs(), gone, lock, {}, base_reference="b", mtime=0)
