"""Fixtures for the patch-stack tests: a pristine vLLM 0.24.0 tree, copied to a
session tmp dir and patched with GNU patch (zero fuzz), importable as ``vllm``."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PATCHES = REPO / "patches"


def read_series(name: str) -> list[str]:
    """Patch file names of a quilt series file in patches/ (the builder's own parser)."""
    from builder import patchstack

    return patchstack.read_series(PATCHES / name)


def run_patch(root: Path, patch_file: Path, *extra: str) -> subprocess.CompletedProcess:
    """GNU patch forward with the builder's flags (zero fuzz) on ``root``; ``extra`` adds e.g.
    --dry-run."""
    from builder import patchstack

    return patchstack.run_patch(root, patch_file, "--forward", *extra)


@pytest.fixture(scope="session")
def pristine_site() -> Path:
    """Folder holding the pristine (never modified) vLLM 0.24.0 ``vllm/`` tree."""
    from standin.vllm_sources import vllm_site

    return vllm_site(REPO / "build" / "cache")


@pytest.fixture(scope="session")
def patched_site(pristine_site: Path, tmp_path_factory) -> Path:
    """Copy of the pristine tree with ``patches/series`` applied (zero fuzz).

    Applied by the builder's own ``builder.patchstack`` (the code path images use).
    Returns the folder that holds the patched ``vllm/``.
    """
    from builder.patchstack import apply_stack, load_series

    site = tmp_path_factory.mktemp("vllm-0.24.0-patched")
    shutil.copytree(pristine_site / "vllm", site / "vllm")
    outcomes = apply_stack(load_series(PATCHES / "series"), site)
    assert [(o.patch.name, o.result) for o in outcomes] == [
        (n, "applied") for n in read_series("series")
    ]
    assert not any("fuzz" in o.detail.lower() or "offset" in o.detail.lower() for o in outcomes)
    return site


@pytest.fixture(scope="session")
def vllm_on_path(patched_site: Path):
    """Put the patched tree first on sys.path so ``import vllm`` is the patched one."""
    sys.path.insert(0, str(patched_site))
    importlib.invalidate_caches()
    import vllm  # noqa: F401

    assert Path(vllm.__file__).resolve().is_relative_to(patched_site.resolve())
    yield patched_site
    sys.path.remove(str(patched_site))


CONVERSION_REL = "vllm/model_executor/layers/quantization/utils/mxfp8_block_fp8.py"
CONVERSION_SRC = PATCHES / "src" / CONVERSION_REL  # the real file; patch 0001 is generated from it


def load_conversion_source():
    """The conversion module imported straight from ``patches/src`` (torch + stdlib only)."""
    spec = importlib.util.spec_from_file_location("m3_mxfp8_block_fp8_src", CONVERSION_SRC)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def conv():
    """The conversion module, imported directly from its source file (no vLLM tree needed)."""
    return load_conversion_source()


@pytest.fixture(scope="session")
def conv_in_tree(vllm_on_path):
    """The same module as the patched vLLM tree imports it (after patch 0001)."""
    return importlib.import_module(CONVERSION_REL[:-3].replace("/", "."))


class _ListHandler(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def vllm_logs(vllm_on_path):
    """Messages logged by the ``vllm`` logger tree during the test; resets the
    ``*_once`` caches so "logged once" is observable per test."""
    import vllm.logger as vlog

    for fn in ("_print_info_once", "_print_warning_once", "_print_debug_once"):
        getattr(vlog, fn).cache_clear()
    handler = _ListHandler()
    root = logging.getLogger("vllm")
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield handler.messages
    root.removeHandler(handler)
    root.setLevel(old_level)
