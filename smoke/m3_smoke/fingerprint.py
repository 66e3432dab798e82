"""File fingerprints: sha256, and the git blob id upstream vLLM names file versions by.

The one implementation: the suite checks images with it, and the builder (which installs
``m3_smoke``) records the lock and the manifest with it. Standard library only.
"""

from __future__ import annotations

import hashlib


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def git_blob_id(data: bytes) -> str:
    """The id ``git hash-object`` gives these bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
