"""builder.hashing: fingerprints, checked against `git hash-object` / sha256sum values (not
recomputed here)."""

from __future__ import annotations

from pathlib import Path

import m3_smoke.fingerprint
from builder import hashing
from builder.hashing import Fingerprint, git_blob_id, sha256_bytes, sha256_file, tree_digest

HELLO_BLOB = (
    "ce013625030ba8dba906f756967f9e9ca394464a"  # printf 'hello\n' | git hash-object --stdin
)
HELLO_SHA = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
EMPTY_BLOB = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"  # git hash-object /dev/null


def test_one_implementation_shared_with_the_in_image_suite():
    assert hashing.git_blob_id is m3_smoke.fingerprint.git_blob_id
    assert hashing.sha256_bytes is m3_smoke.fingerprint.sha256_bytes


def test_git_blob_id_and_sha256():
    assert git_blob_id(b"hello\n") == HELLO_BLOB
    assert git_blob_id(b"") == EMPTY_BLOB
    assert sha256_bytes(b"hello\n") == HELLO_SHA
    assert Fingerprint.of(b"hello\n") == Fingerprint(git_blob=HELLO_BLOB, sha256=HELLO_SHA)
    assert Fingerprint.of(b"hello\n").as_dict() == {"git_blob": HELLO_BLOB, "sha256": HELLO_SHA}


def test_sha256_file_reads_in_blocks(tmp_path: Path):
    big = tmp_path / "big"
    big.write_bytes(b"hello\n" * 400_000)  # > one 1 MiB block
    assert sha256_file(big) == sha256_bytes(big.read_bytes())
    (tmp_path / "h").write_bytes(b"hello\n")
    assert sha256_file(tmp_path / "h") == HELLO_SHA


def test_tree_digest_names_paths_and_contents_not_order(tmp_path: Path):
    (tmp_path / "d").mkdir()
    a, b = tmp_path / "a", tmp_path / "d" / "b"
    a.write_bytes(b"1")
    b.write_bytes(b"2")
    first = tree_digest(tmp_path, [a, b])
    assert tree_digest(tmp_path, [b, a]) == first
    b.write_bytes(b"3")
    assert tree_digest(tmp_path, [a, b]) != first
    b.write_bytes(b"2")
    b.rename(tmp_path / "d" / "c")
    assert tree_digest(tmp_path, [a, tmp_path / "d" / "c"]) != first
