"""tuning/PROVENANCE.yaml records every device a target installs the measured tables for
(image.yaml: tables_also_for) as measured on MI300X."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def test_every_family_copy_in_the_spec_is_recorded_as_measured_on_mi300x():
    provenance = yaml.safe_load((REPO / "tuning" / "PROVENANCE.yaml").read_text())
    recorded = {e["device"]: e["measured_on"] for e in provenance["also_installed_for"]}
    spec = yaml.safe_load((REPO / "image.yaml").read_text())
    used = {d for t in spec["targets"].values() for d in t.get("tables_also_for", [])}
    assert used == {"AMD_Instinct_MI325X"}
    assert {d: recorded.get(d) for d in used} == {"AMD_Instinct_MI325X": "AMD_Instinct_MI300X"}
    assert all(
        name.count("device_name=AMD_Instinct_MI300X") == 1
        for name in (e["file"] for e in provenance["tables"])
    )
