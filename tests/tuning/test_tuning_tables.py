"""tuning/ holds exact copies of the measured tables (sha256 + git blob id recorded in
tuning/PROVENANCE.yaml when they were copied), under vLLM's lookup names."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from builder.hashing import git_blob_id, sha256_bytes

REPO = Path(__file__).resolve().parents[2]
LOOKUP_NAME = re.compile(
    r"^E=(\d+),N=(\d+),device_name=AMD_Instinct_MI300X,dtype=fp8_w8a8,block_shape=\[128,128\]\.json$"
)


def provenance() -> dict:
    return yaml.safe_load((REPO / "tuning" / "PROVENANCE.yaml").read_text())


def test_every_table_is_a_byte_copy_of_its_measured_source():
    for entry in provenance()["tables"]:
        ours = (REPO / "tuning" / entry["file"]).read_bytes()
        assert sha256_bytes(ours) == entry["sha256"], entry["file"]
        assert git_blob_id(ours) == entry["git_blob"], entry["file"]


def test_tuning_holds_exactly_the_recorded_tables_under_lookup_names():
    recorded = {e["file"] for e in provenance()["tables"]}
    present = {p.name for p in (REPO / "tuning").glob("*.json")}
    assert present == recorded
    shapes = sorted((int(m.group(1)), int(m.group(2))) for m in map(LOOKUP_NAME.match, present))
    assert shapes == [(16, 3072), (128, 384)]


def test_tables_parse_as_batch_size_to_tile_config():
    for name in (e["file"] for e in provenance()["tables"]):
        table = json.loads((REPO / "tuning" / name).read_text())
        assert all(key.isdigit() for key in table)
        for config in table.values():
            assert {
                "BLOCK_SIZE_M",
                "BLOCK_SIZE_N",
                "BLOCK_SIZE_K",
                "GROUP_SIZE_M",
                "num_warps",
            } <= set(config)


def test_spec_targets_install_every_table():
    from builder.spec import load_spec

    # Targets as the builder sees them (a target that `extends` a definition gets its tables).
    for name, target in load_spec(REPO / "image.yaml").resolved.items():
        assert sorted(Path(t).name for t in target["tables"]) == sorted(
            e["file"] for e in provenance()["tables"]
        ), name
