"""Fixtures for the smoke-suite tests (helpers live in m3_smoke_testlib.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from m3_smoke_testlib import (  # noqa: E402
    SuiteRun,
    Tree,
    apply_series,
    ensure_pristine_site,
    install_tables,
    run_suite,
)


@pytest.fixture(scope="session")
def patched_tree(tmp_path_factory) -> Tree:
    pristine = ensure_pristine_site()
    root = tmp_path_factory.mktemp("patched")
    site = root / "site"
    shutil.copytree(pristine / "vllm", site / "vllm", ignore=shutil.ignore_patterns("__pycache__"))
    tree = Tree(site, apply_series(site), install_tables(site / "vllm"), root / "manifest.json")
    tree.write_manifest()
    return tree


@pytest.fixture
def variant(patched_tree, tmp_path):
    """``variant(mutate)``: a hard-linked copy of the patched tree; ``mutate(vllm_root)``
    edits it (files are replaced, never written through the links), then the manifest
    is regenerated the way the builder would for that (broken) patch stack."""

    def make(mutate, *, patched=None) -> Tree:
        site = tmp_path / "site"
        subprocess.run(["cp", "-al", str(patched_tree.site), str(site)], check=True)
        tree = Tree(
            site,
            list(patched or patched_tree.patched),
            list(patched_tree.tables),
            tmp_path / "manifest.json",
        )
        mutate(tree)
        tree.write_manifest()
        return tree

    return make


@pytest.fixture
def suite(tmp_path):
    def run(tree: Tree, **kw) -> SuiteRun:
        d = tmp_path / f"report-{len(list(tmp_path.glob('report-*')))}"
        return run_suite(tree, d, **kw)

    return run
