"""Content fingerprints: sha256 for our own inputs, git blob ids to match upstream vLLM files."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def git_blob_id(data: bytes) -> str:
    """The id ``git hash-object`` gives these bytes: how upstream names file versions."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class Fingerprint:
    """A file's content as the lock and the image manifest record it: git blob id and sha256."""
    git_blob: str
    sha256: str

    @classmethod
    def of(cls, data: bytes) -> "Fingerprint":
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
