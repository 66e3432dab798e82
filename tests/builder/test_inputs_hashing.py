"""What the lock's builder sha256 covers: the modules that shape the image, nothing else."""

from __future__ import annotations

import fnmatch
import shutil
from pathlib import Path

import pytest

from builder import inputs
from builder.inputs import IMAGE_SHAPING, NOT_IMAGE_SHAPING, builder_digest

REPO = Path(__file__).resolve().parents[2]


def _modules() -> list[str]:
    root = REPO / "builder"
    return sorted(
        p.relative_to(root).as_posix() for p in root.rglob("*.py") if "__pycache__" not in p.parts
    )


def test_every_builder_module_is_classified_once():
    for module in _modules():
        shaping = module in IMAGE_SHAPING
        not_shaping = any(fnmatch.fnmatch(module, pattern) for pattern in NOT_IMAGE_SHAPING)
        assert shaping != not_shaping, (
            f"builder/{module}: list it in exactly one of inputs.IMAGE_SHAPING "
            f"(it changes image bytes) or inputs.NOT_IMAGE_SHAPING"
        )
    assert set(IMAGE_SHAPING) <= set(_modules())


def test_the_standin_is_not_in_the_product_package():
    assert not (REPO / "builder" / "standin").exists()
    assert not any("standin" in module for module in _modules())


@pytest.fixture
def builder_copy(tmp_path, monkeypatch) -> Path:
    copy = tmp_path / "builder"
    shutil.copytree(REPO / "builder", copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(inputs, "PACKAGE_DIR", copy)
    return copy


@pytest.mark.parametrize(
    "module", ["validate.py", "delivery.py", "commands/push.py", "cli.py", "verify.py"]
)
def test_editing_a_module_that_does_not_shape_the_image_keeps_the_digest(builder_copy, module):
    before = builder_digest()
    with (builder_copy / module).open("a") as handle:
        handle.write("\n# an edit\n")
    assert builder_digest() == before


@pytest.mark.parametrize("module", ["tree.py", "assemble.py", "patchstack.py", "lock.py"])
def test_editing_a_module_that_shapes_the_image_changes_the_digest(builder_copy, module):
    before = builder_digest()
    with (builder_copy / module).open("a") as handle:
        handle.write("\n# an edit\n")
    assert builder_digest() != before
