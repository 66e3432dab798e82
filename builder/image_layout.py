"""Where the builder puts its own files inside an image (one place; the smoke suite is told by
argument)."""

from __future__ import annotations

from pathlib import PurePosixPath

INSTALL_DIR = PurePosixPath("/opt/m3-image")
MANIFEST_PATH = INSTALL_DIR / "manifest.json"  # what the smoke suite checks the image against
LOCK_PATH = INSTALL_DIR / "lock.json"  # the very lock the image was built from
SMOKE_INSTALL = INSTALL_DIR / "smoke"  # the suite (``m3_smoke``) and its golden data
