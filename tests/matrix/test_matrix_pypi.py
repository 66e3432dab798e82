"""``builder matrix`` against the real PyPI (network; never skipped): vLLM 0.34.0, the smallest
wheel of the 0.24.0-0.34.0 range (228 MiB, downloaded once into build/cache and sha256-checked),
must give exactly what docs/compat-matrix.json records; the ported stack applies at zero fuzz,
the 0.30 stack does not, and a version PyPI lacks is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SERIES = [
    "patches/series",
    "patches/series.v0.30.0",
    "patches/series.v0.34.0",
    "patches/series.pinned-4a560dd",
]


def matrix(*args):
    return subprocess.run(
        [sys.executable, "-m", "builder", "matrix", *args, "--cache-dir", "build/cache"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_newest_release_matches_the_committed_matrix(tmp_path):
    res = matrix(
        "0.34.0",
        *[a for s in SERIES for a in ("--series", s)],
        "--json",
        str(tmp_path / "m.json"),
        "--output",
        str(tmp_path / "m.md"),
    )
    assert res.returncode == 0, res.stderr
    [got] = json.loads((tmp_path / "m.json").read_text())
    committed = {
        r["version"]: r for r in json.loads((REPO / "docs" / "compat-matrix.json").read_text())
    }
    assert got == committed["0.34.0"]
    assert got["sha256"] == "79ca4b3cd74aec08c4bf476bdf0cb15735b605ae5368526a2faae1e30f044ca2"
    assert {s["series"]: s["clean"] for s in got["series"]} == {
        "patches/series": False,
        "patches/series.v0.30.0": False,
        "patches/series.v0.34.0": True,
        "patches/series.pinned-4a560dd": False,
    }


def test_check_passes_for_the_ported_stack_and_fails_for_the_older_one():
    assert (
        matrix(
            "0.34.0", "--series", "patches/series.v0.34.0", "--check", "--output", "/dev/null"
        ).returncode
        == 0
    )
    res = matrix("0.34.0", "--series", "patches/series.v0.30.0", "--check", "--output", "/dev/null")
    assert res.returncode == 2
    assert res.stderr.splitlines()[-1] == (
        "error: 1 conflict(s); first: vllm==0.34.0: patches/series.v0.30.0: "
        "0005-v0-30-mxfp8-oracle-triton-block-fp8-on-fnuz.patch: "
        "vllm/model_executor/layers/fused_moe/oracle/mxfp8.py: "
        "hunk #1 at line 12, #2 at line 128 does not apply at zero fuzz"
    )


def test_version_not_on_pypi_is_one_line():
    res = matrix("0.23.1", "--output", "/dev/null")
    assert res.returncode == 2
    assert res.stderr.strip().startswith(
        "error: vllm==0.23.1: not a release on https://pypi.org (newest: "
    )
    assert len(res.stderr.strip().splitlines()) == 1
