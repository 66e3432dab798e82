"""The ported targets in image.yaml agree with the computed matrix (docs/compat-matrix.json, no
network): their series applies at zero fuzz to their release, and every expected pre-image blob
id is the one the release's wheel holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
MATRIX = {r["version"]: r for r in json.loads((REPO / "docs" / "compat-matrix.json").read_text())}
TARGETS = yaml.safe_load((REPO / "image.yaml").read_text())["targets"]


def test_committed_matrix_covers_every_release_from_0_24_to_0_34():
    assert list(MATRIX) == [
        "0.24.0",
        "0.25.0",
        "0.25.1",
        "0.26.0",
        "0.27.0",
        "0.27.1",
        "0.28.0",
        "0.29.0",
        "0.30.0",
        "0.31.0",
        "0.32.0",
        "0.33.0",
        "0.34.0",
    ]


@pytest.mark.parametrize(
    "name, version",
    [
        ("mi300x-v0-30", "0.30.0"),
        ("mi300x-v0-34", "0.34.0"),
        ("standin-v0-30", "0.30.0"),
        ("standin-v0-34", "0.34.0"),
        ("standin", "0.24.0"),
    ],
)
def test_target_series_applies_and_expect_matches_the_release(name, version):
    target, release = TARGETS[name], MATRIX[version]
    assert str(target["vllm"]["version"]) == version
    [series] = [s for s in release["series"] if s["series"] == target["series"]]
    assert series["clean"], series
    assert all(p["result"] == "applies" for p in series["patches"])
    for rel, blob in target["expect"].items():
        found = release["preimages"][f"vllm/{rel}"]
        assert (found or "absent").startswith(str(blob)) if blob != "absent" else found is None, (
            rel,
            blob,
            found,
        )
    touched = {f["file"] for p in series["patches"] for f in p["files"]}
    assert touched <= {f"vllm/{rel}" for rel in target["expect"]}


def test_release_lines_of_the_ported_stacks():
    clean = {
        s: [v for v, r in MATRIX.items() for x in r["series"] if x["series"] == s and x["clean"]]
        for s in ("patches/series", "patches/series.v0.30.0", "patches/series.v0.34.0")
    }
    assert clean == {
        "patches/series": ["0.24.0"],
        "patches/series.v0.30.0": ["0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0"],
        "patches/series.v0.34.0": ["0.34.0"],
    }
