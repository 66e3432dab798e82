"""builder.verify: labels and in-image files checked against the lock, with an in-memory image (no
engine)."""

from __future__ import annotations

import json

import pytest
from lockfixture import FIXED_BUILDER_VERSION, TABLE_REL, fixed_base, fixed_inputs, fixed_tree

import builder
from builder.context import smoke_manifest
from builder.image_layout import LOCK_PATH, MANIFEST_PATH
from builder.lock import compute_lock, lock_json
from builder.provenance import NS, image_labels
from builder.verify import check_files, check_labels, refuse, rootfs_problems

ROOT = "/usr/lib/python3/dist-packages/vllm"


@pytest.fixture
def lock(monkeypatch):
    monkeypatch.setattr(builder, "__version__", FIXED_BUILDER_VERSION)
    return compute_lock(fixed_inputs(), fixed_base(), fixed_tree())


@pytest.fixture
def image_files():
    """The patched files a good image holds, keyed by path (``real_lock`` fingerprints these
    bytes)."""
    return {
        f"{ROOT}/a.py": b"a = 1\n",
        f"{ROOT}/new.py": b"new = 1\n",
        f"{ROOT}/{TABLE_REL}": b"{}\n",
    }


@pytest.fixture
def real_lock(monkeypatch, image_files):
    from builder.hashing import Fingerprint
    from builder.tree import PatchedTree

    monkeypatch.setattr(builder, "__version__", FIXED_BUILDER_VERSION)
    fixed = fixed_tree()
    post = {rel: Fingerprint.of(image_files[f"{ROOT}/{rel}"]) for rel in fixed.post}
    tree = PatchedTree(parent=fixed.parent, pre=fixed.pre, post=post, modes={}, outcomes=())
    return compute_lock(fixed_inputs(), fixed_base(), tree), tree


def _reader(files):
    return lambda paths: {p: files.get(p) for p in paths}


def _image(real_lock, image_files):
    lock, tree = real_lock
    files = dict(image_files)
    files[str(LOCK_PATH)] = lock_json(lock)
    files[str(MANIFEST_PATH)] = json.dumps(smoke_manifest(fixed_inputs(), tree)).encode()
    return files


def test_labels_of_a_good_image_pass_and_a_changed_one_is_named(lock):
    labels = image_labels(lock, lock.inputs.labels)
    assert check_labels(labels, lock) == []
    bad = {**labels, f"{NS}.vllm.root": "/elsewhere"}
    del bad[f"{NS}.content-tag"]
    problems = check_labels(bad, lock)
    assert problems[0].startswith(
        f"label {NS}.content-tag: expected 0.22.1rc1.dev490-m3-"
    ) and problems[0].endswith("found nothing")
    assert problems[1:] == [f"label {NS}.vllm.root: expected {ROOT}, found /elsewhere"]


def test_a_foreign_image_leads_with_the_identity_labels(lock):
    problems = check_labels({"org.opencontainers.image.title": "someone else's"}, lock)
    assert [p.split(":")[0] for p in problems[:2]] == [
        f"label {NS}.lock.sha256",
        f"label {NS}.content-tag",
    ]


def test_files_of_a_good_image_pass(real_lock, image_files):
    assert check_files(_reader(_image(real_lock, image_files)), real_lock[0]) == []


def test_a_changed_file_a_missing_file_and_a_foreign_lock_are_each_named(
    real_lock, image_files, lock
):
    files = _image(real_lock, image_files)
    files[f"{ROOT}/a.py"] = b"a = 2\n"
    del files[f"{ROOT}/new.py"]
    files[str(LOCK_PATH)] = lock_json(lock)  # another lock (the fake fingerprints)
    problems = check_files(_reader(files), real_lock[0])
    assert problems[0].startswith("file a.py: sha256 ") and "lock says" in problems[0]
    assert problems[1] == "file new.py: missing"
    assert problems[2].startswith(f"{LOCK_PATH}: differs from the lock (content tag ")
    assert len(problems) == 3


def test_a_broken_manifest_is_named(real_lock, image_files):
    files = _image(real_lock, image_files)
    files[str(MANIFEST_PATH)] = b"not json"
    assert check_files(_reader(files), real_lock[0]) == [f"{MANIFEST_PATH}: not a manifest"]
    files[str(MANIFEST_PATH)] = json.dumps({"tables": [], "patched_files": {}}).encode()
    assert check_files(_reader(files), real_lock[0]) == [
        f"{MANIFEST_PATH}: tables differ from the lock",
        f"{MANIFEST_PATH}: patched file fingerprints differ from the lock",
    ]


def test_rootfs_is_read_from_disk_and_links_do_not_count(real_lock, image_files, tmp_path):
    for path, data in _image(real_lock, image_files).items():
        out = tmp_path / path.lstrip("/")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
    assert rootfs_problems(tmp_path, real_lock[0]) == []
    target = tmp_path / ROOT.lstrip("/") / "a.py"
    target.rename(target.with_name("real.py"))
    target.symlink_to("real.py")
    assert rootfs_problems(tmp_path, real_lock[0]) == ["file a.py: missing"]


def test_refuse_is_one_line_with_the_count():
    error = refuse("img:1", ["first problem", "second", "third"], "the lock")
    assert (
        str(error) == "img:1: refused: does not match the lock (first problem; 2 more problem(s))"
    )
    assert error.details == ["first problem", "second", "third"]
