"""Helpers and fixtures for the builder-core unit tests: tiny projects, trees and patches in
tmp_path.

No Docker, no registry. GNU patch (/usr/bin/patch) is real; nothing is mocked.
"""

from __future__ import annotations

import difflib
import os
import shutil
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
TABLE_NAME = "E=1,N=2,device_name=AMD_Instinct_MI300X.json"

A_PY = "def f():\n    return 1\n\n\ndef g():\n    return 2\n\n\ndef h():\n    return 3\n"
B_PY = "X = 1\nY = 2\nZ = 3\nW = 4\nV = 5\n"


def assert_one_line(exc: BaseException, *needles: str) -> str:
    """The error is exactly one line and names every needle (file, key path, value)."""
    text = str(exc)
    assert "\n" not in text and "\r" not in text, repr(text)
    for needle in needles:
        assert needle in text, f"{needle!r} not in {text!r}"
    return text


def udiff(old: str | None, new: str | None, rel: str) -> str:
    """A unified diff (a/ b/ prefixes, -p1) of one file; None means absent."""
    old_lines = old.splitlines(True) if old is not None else []
    new_lines = new.splitlines(True) if new is not None else []
    src = f"a/{rel}" if old is not None else "/dev/null"
    dst = f"b/{rel}" if new is not None else "/dev/null"
    return "".join(difflib.unified_diff(old_lines, new_lines, src, dst))


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry under root: files by bytes, links by target, dirs marked."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                out[rel] = "link:" + os.readlink(path)
            elif path.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = path.read_bytes()
    return out


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A folder holding a small ``vllm/`` package (the parent GNU patch -p1 runs in)."""
    parent = tmp_path / "site"
    (parent / "vllm" / "sub").mkdir(parents=True)
    (parent / "vllm" / "a.py").write_text(A_PY)
    (parent / "vllm" / "sub" / "b.py").write_text(B_PY)
    (parent / "vllm" / "untouched.txt").write_text("keep me\n")
    return parent


@pytest.fixture
def write_series(tmp_path: Path):
    """write_series({"0001-x.patch": text, ...}, extra_lines=...) -> series path (in order)."""

    def _write(
        patches: dict[str, str], lines: list[str] | None = None, folder: str = "patches"
    ) -> Path:
        where = tmp_path / folder
        where.mkdir(exist_ok=True)
        for name, text in patches.items():
            (where / name).write_text(text)
        series = where / "series"
        series.write_text("\n".join(lines if lines is not None else list(patches)) + "\n")
        return series

    return _write


def minimal_doc() -> dict:
    return {
        "schema": 1,
        "default_target": "t",
        "targets": {
            "t": {
                "description": "tiny target",
                "base": {
                    "image": "127.0.0.1:5000/m3/base:v1",
                    "digest": DIGEST_A,
                    "platform": "linux/amd64",
                },
                "vllm": {
                    "root": "/usr/lib/python3/dist-packages/vllm",
                    "python": "/usr/bin/python3",
                    "version": "0.24.0",
                    "revision": "v0.24.0",
                },
                "series": "patches/series",
                "expect": {"a.py": "0123abc", "new.py": "absent"},
                "tables": [f"tuning/{TABLE_NAME}"],
                "output": {"repository": "127.0.0.1:5000/m3/out", "aliases": ["latest", "v1.0"]},
                "labels": {"org.example.title": "tiny"},
                "env": {"M3_FLAG": "1"},
                "lock": "locks/t.lock.yaml",
            }
        },
    }


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder with a series, one tiny patch and one table (no image.yaml yet)."""
    root = tmp_path / "proj"
    (root / "patches").mkdir(parents=True)
    (root / "tuning").mkdir()
    (root / "patches" / "0001-a.patch").write_text(
        udiff(A_PY, A_PY.replace("return 1", "return 10"), "vllm/a.py")
    )
    (root / "patches" / "series").write_text("# tiny\n0001-a.patch\n")
    (root / "tuning" / TABLE_NAME).write_text('{"1": {"BLOCK_SIZE_M": 16}}\n')
    return root


@pytest.fixture
def write_spec(project: Path):
    """write_spec(doc_or_text) -> path of project/image.yaml."""

    def _write(doc: dict | str) -> Path:
        path = project / "image.yaml"
        path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
        return path

    return _write


@pytest.fixture(scope="session")
def pristine_vllm_site() -> Path:
    """build/cache/vllm-0.24.0/site (downloads the pinned wheel from PyPI when missing)."""
    from standin.vllm_sources import vllm_site

    site = vllm_site(REPO / "build" / "cache")
    assert (site / "vllm" / "__init__.py").is_file()
    return site


def copy_files(src_parent: Path, dst_parent: Path, rels: list[str]) -> None:
    for rel in rels:
        src = src_parent / rel
        if src.exists():
            (dst_parent / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst_parent / rel)
