"""Fetch a pinned vLLM release (0.24.0 by default) from PyPI.

Its Python sources are laid out as an image installs them.

vLLM 0.24.0 is the closest public source to the production revision: the files the
patch stack touches have the same git blob ids (see README). We take the released
wheel (hash-pinned), and extract the ``vllm/`` package without its compiled CUDA
extensions, which cannot load on a CPU host or on ROCm anyway.
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from pathlib import Path

from builder.errors import BuilderError
from builder.pypi import PyPI

VLLM_VERSION = "0.24.0"  # the default stand-in (target `standin`)
# Every release a stand-in is built from: wheel file and its sha256 (as PyPI's JSON API gives it;
# docs/compat-matrix.md lists them). The ported stacks' stand-ins use 0.30.0 and 0.34.0.
WHEELS = {
    "0.24.0": (
        "vllm-0.24.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        "2d2831aeba311292250df0132dbc4d8e9f42c654536eaec48e6fe58acb1822cf",
    ),
    "0.30.0": (
        "vllm-0.30.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        "ef52ee58c410ead0b8afb190838fa4cbcb52075596f67862a03859d984966ac4",
    ),
    "0.34.0": (
        "vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        "79ca4b3cd74aec08c4bf476bdf0cb15735b605ae5368526a2faae1e30f044ca2",
    ),
}
WHEEL_NAME, WHEEL_SHA256 = WHEELS[VLLM_VERSION]


def pinned(version: str) -> tuple[str, str]:
    if version not in WHEELS:
        raise BuilderError(
            f"vLLM {version}: no stand-in is pinned for it (have: {', '.join(WHEELS)})"
        )
    return WHEELS[version]


def fetch_wheel(cache_root: Path, version: str = VLLM_VERSION) -> Path:
    """The pinned vLLM wheel, downloaded once through builder.pypi (hash-checked while it
    streams, cached under ``<cache_root>/pypi/<sha256>/``, shared with ``builder matrix``)."""
    name, sha256 = pinned(version)
    cached = Path(cache_root) / "pypi" / sha256 / name  # written only after its hash matched
    if cached.is_file():
        return cached
    pypi = PyPI()
    release = pypi.wheel(version)
    if (release.filename, release.sha256) != (name, sha256):
        raise BuilderError(
            f"vLLM {version}: PyPI lists {release.filename} sha256 {release.sha256}, "
            f"not the pinned {name} {sha256}"
        )
    return pypi.fetch(release, Path(cache_root))[0]


def extract_sources(wheel: Path, site_dir: Path) -> Path:
    """Extract ``vllm/`` (minus ``*.so``) into ``site_dir``; returns the package root.

    The extraction goes to a sibling temporary folder and is renamed into place, so an
    interrupted run never leaves a half-extracted tree behind.
    """
    package_root = site_dir / "vllm"
    if package_root.is_dir():
        return package_root
    site_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=site_dir, prefix=".extract-"))
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = [
                m
                for m in archive.namelist()
                if m.startswith("vllm/") and not m.endswith("/") and ".so" not in Path(m).suffixes
            ]
            archive.extractall(staging, members)
        (staging / "vllm").replace(package_root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return package_root


def vllm_site(cache_root: Path, version: str = VLLM_VERSION) -> Path:
    """A folder holding a pristine ``vllm/`` package tree from the pinned wheel."""
    base = cache_root / f"vllm-{version}"
    if not (base / "site" / "vllm").is_dir():
        extract_sources(fetch_wheel(cache_root, version), base / "site")
    return base / "site"
