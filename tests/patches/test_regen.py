"""Patch 0001 is generated from patches/src: the two may not drift, and `make patches` regenerates
it."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

from .conftest import CONVERSION_REL, CONVERSION_SRC, PATCHES, run_patch

REPO = PATCHES.parent
PATCH_0001 = PATCHES / "0001-mxfp8-block-fp8-conversion.patch"


def _regen_module():
    spec = importlib.util.spec_from_file_location("m3_patches_regen", PATCHES / "regen.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_0001_is_exactly_what_the_source_renders():
    regen = _regen_module()
    assert [p.name for p in regen.generated_patches()] == [PATCH_0001.name]
    assert regen.render_patch(PATCH_0001) == PATCH_0001.read_text()
    text = PATCH_0001.read_text()
    assert text.startswith("Subject: Add MXFP8 -> 128x128 block-FP8 weight conversion module\n")
    assert f"+++ b/{CONVERSION_REL}\n" in text
    assert f"@@ -0,0 +1,{len(CONVERSION_SRC.read_text().splitlines())} @@" in text


def test_patched_tree_holds_the_source_bytes(patched_site):
    assert (patched_site / CONVERSION_REL).read_bytes() == CONVERSION_SRC.read_bytes()


def _project_copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(PATCHES, root / "patches", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(root / "patches" / "regen.py"), *args],
        capture_output=True,
        text=True,
        cwd=root,
    )


def test_check_fails_on_drift_and_make_patches_fixes_it(tmp_path):
    root = _project_copy(tmp_path)
    assert _run(root, "--check").returncode == 0
    src = root / "patches" / "src" / CONVERSION_REL
    src.write_text(src.read_text().replace("MXFP8_GROUP = 32\n", "MXFP8_GROUP = 32  # edited\n"))
    drift = _run(root, "--check")
    assert drift.returncode == 1
    assert drift.stderr.strip() == (
        "error: 0001-mxfp8-block-fp8-conversion.patch drifted from patches/src; run `make patches`"
    )
    fixed = _run(root)
    assert fixed.returncode == 0 and fixed.stdout.strip() == (
        "regenerated patches/0001-mxfp8-block-fp8-conversion.patch"
    )
    assert _run(root, "--check").returncode == 0
    patch = (root / "patches" / PATCH_0001.name).read_text()
    assert "+MXFP8_GROUP = 32  # edited\n" in patch
    # the header (hand-written) is kept byte for byte
    assert patch.split("--- /dev/null\n")[0] == PATCH_0001.read_text().split("--- /dev/null\n")[0]
    # and GNU patch turns the regenerated diff back into exactly the edited source
    tree = tmp_path / "tree"
    tree.mkdir()
    res = run_patch(tree, root / "patches" / PATCH_0001.name)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tree / CONVERSION_REL).read_bytes() == src.read_bytes()


def test_missing_source_is_one_error_line(tmp_path):
    root = _project_copy(tmp_path)
    (root / "patches" / "src" / CONVERSION_REL).unlink()
    res = _run(root, "--check")
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and res.stderr.startswith(
        f"error: {PATCH_0001.name}: creates {CONVERSION_REL} but its source "
    )


def test_makefile_has_the_targets():
    make = (REPO / "Makefile").read_text()
    assert "\npatches:" in make and "patches/regen.py\n" in make
    assert "\ncheck-patches:" in make and "patches/regen.py --check" in make
