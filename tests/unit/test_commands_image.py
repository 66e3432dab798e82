"""builder.commands.image.print_plan: the dry-run plan, read from the typed lock (absent files
named)."""

from __future__ import annotations

from lockfixture import (
    FIXED_BUILDER_VERSION,
    FIXED_TAG,
    TABLE_REL,
    fixed_base,
    fixed_inputs,
    fixed_tree,
)

import builder
from builder.commands.image import print_plan
from builder.lock import compute_lock
from builder.log import StepLog
from builder.workflow import Locked


def test_plan_lists_base_patches_tables_and_files(monkeypatch, capsys):
    monkeypatch.setattr(builder, "__version__", FIXED_BUILDER_VERSION)
    locked = Locked(
        inputs=fixed_inputs(), lock=compute_lock(fixed_inputs(), fixed_base(), fixed_tree())
    )
    print_plan(locked, StepLog(quiet=True))
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == f"            platform manifest sha256:{'a' * 64}, config sha256:{'b' * 64}"
    assert (
        lines[3] == "vllm        0.22.1rc1.dev490+g4a560dd8d at /usr/lib/python3/dist-packages/vllm"
    )
    assert lines[4] == f"patch       patches/0001-a.patch  sha256:{'3' * 12}  (vLLM #45726)"
    assert lines[5] == f"patch       patches/0002-b.patch  sha256:{'4' * 12}  (local)"
    assert f"file        a.py: {'c' * 10} -> {'d' * 10}" in lines
    assert f"file        new.py: absent -> {'e' * 10}" in lines
    assert f"file        {TABLE_REL}: absent -> {'f' * 10}" in lines
    assert f"image       127.0.0.1:5000/m3/out:{FIXED_TAG}  (+ latest, v1.0)" in lines
