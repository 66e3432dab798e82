"""builder.patchstack: the one series parser and the one set of GNU patch flags (no patch run
here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.errors import PatchError
from builder.patchstack import PATCH_FLAGS, read_series, touched_files

REPO = Path(__file__).resolve().parents[2]


def test_read_series_of_the_committed_stacks():
    names = read_series(REPO / "patches" / "series")
    assert names and all(n.endswith(".patch") and (REPO / "patches" / n).is_file() for n in names)
    pinned = read_series(REPO / "patches" / "series.pinned-4a560dd")
    assert pinned[: len(names)] == names


def test_read_series_skips_comments_and_checks_entries(tmp_path):
    series = tmp_path / "series"
    series.write_text("# head\n\n0001-a.patch -p1  # why\n   \n0002-b.patch\n")
    assert read_series(series) == ["0001-a.patch", "0002-b.patch"]
    series.write_text("0001-a.patch -p0\n")
    with pytest.raises(PatchError, match=r"series:1: 0001-a.patch: only -p1"):
        read_series(series)


def test_zero_fuzz_no_backups_no_rejects():
    assert PATCH_FLAGS == (
        "-p1",
        "--fuzz=0",
        "--batch",
        "--no-backup-if-mismatch",
        "--reject-file=-",
    )


def test_touched_files_keeps_first_touch_order():
    class P:  # only .files is read
        def __init__(self, *files):
            self.files = files

    assert touched_files([P("vllm/b.py", "vllm/a.py"), P("vllm/a.py", "vllm/c.py")]) == [
        "vllm/b.py",
        "vllm/a.py",
        "vllm/c.py",
    ]
