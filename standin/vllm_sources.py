"""Fetch vLLM 0.24.0 from PyPI and lay out its Python sources as an image installs them.

vLLM 0.24.0 is the closest public source to the production revision: the files the
patch stack touches have the same git blob ids (see README). We take the released
wheel (hash-pinned), and extract the ``vllm/`` package without its compiled CUDA
extensions, which cannot load on a CPU host or on ROCm anyway.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from builder.errors import BuilderError
from builder.hashing import sha256_file

VLLM_VERSION = "0.24.0"
WHEEL_NAME = "vllm-0.24.0-cp38-abi3-manylinux_2_28_x86_64.whl"
WHEEL_SHA256 = "2d2831aeba311292250df0132dbc4d8e9f42c654536eaec48e6fe58acb1822cf"


def fetch_wheel(cache_dir: Path) -> Path:
    """Download the pinned vLLM wheel into ``cache_dir`` (once) and verify its sha256."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    wheel = cache_dir / WHEEL_NAME
    if not wheel.exists():
        with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
            cmd = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.11",
                "--platform",
                "manylinux_2_28_x86_64",
                "-d",
                tmp,
                f"vllm=={VLLM_VERSION}",
            ]
            result = subprocess.run(cmd, capture_output=True, text=True)
            if result.returncode != 0:
                last = (result.stderr.strip().splitlines() or ["no output"])[-1]
                raise BuilderError(f"pip download vllm=={VLLM_VERSION} failed: {last}")
            Path(tmp, WHEEL_NAME).replace(wheel)
    actual = sha256_file(wheel)
    if actual != WHEEL_SHA256:
        raise BuilderError(f"{wheel}: sha256 {actual} does not match the pinned {WHEEL_SHA256}")
    return wheel


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


def vllm_site(cache_root: Path) -> Path:
    """A folder holding a pristine ``vllm/`` package tree from the pinned wheel."""
    base = cache_root / f"vllm-{VLLM_VERSION}"
    wheel = fetch_wheel(base)
    extract_sources(wheel, base / "site")
    return base / "site"
