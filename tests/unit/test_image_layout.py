"""builder.image_layout: the in-image paths, one definition for context, validate and verify."""

from __future__ import annotations

from builder import context, image_layout, validate, verify


def test_paths():
    assert str(image_layout.MANIFEST_PATH) == "/opt/m3-image/manifest.json"
    assert str(image_layout.LOCK_PATH) == "/opt/m3-image/lock.json"
    assert str(image_layout.SMOKE_INSTALL) == "/opt/m3-image/smoke"


def test_every_user_reads_the_one_definition():
    assert validate.MANIFEST == str(image_layout.MANIFEST_PATH)
    assert validate.SMOKE_PATH == str(image_layout.SMOKE_INSTALL)
    assert (
        context.MANIFEST_PATH is image_layout.MANIFEST_PATH
        and context.LOCK_PATH is image_layout.LOCK_PATH
    )
    assert (
        verify.LOCK_PATH is image_layout.LOCK_PATH
        and verify.MANIFEST_PATH is image_layout.MANIFEST_PATH
    )
