"""Content fingerprints: sha256 for our own inputs, git blob ids to match upstream vLLM files.

The byte-level functions are the smoke suite's own (``m3_smoke.fingerprint``), so what the
builder records and what the suite checks inside the image cannot disagree.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from m3_smoke.fingerprint import git_blob_id, sha256_bytes

__all__ = ["Fingerprint", "git_blob_id", "sha256_bytes", "sha256_file", "tree_digest"]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Fingerprint:
    """A file's content as the lock and the image manifest record it: git blob id and sha256."""

    git_blob: str
    sha256: str

    @classmethod
    def of(cls, data: bytes) -> Fingerprint:
        return cls(git_blob=git_blob_id(data), sha256=sha256_bytes(data))

    def as_dict(self) -> dict[str, str]:
        return {"git_blob": self.git_blob, "sha256": self.sha256}


def tree_digest(root: Path, files: list[Path]) -> str:
    """One sha256 over (relative path, sha256) pairs, for a set of files under ``root``."""
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(sha256_file(path).encode() + b"\n")
    return digest.hexdigest()
