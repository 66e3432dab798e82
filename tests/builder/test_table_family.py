"""The gfx942 family: builder.table_names re-targets a measured table to another device's lookup
name, and a target's ``tables_also_for`` installs every table under those names as well."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from m3_builder_testlib import TABLE_NAME, assert_one_line, minimal_doc

from builder.errors import SpecError
from builder.provenance import image_labels
from builder.spec import Table, load_spec
from builder.table_names import device_of, retarget

E128 = "E=128,N=384,device_name=AMD_Instinct_MI300X,dtype=fp8_w8a8,block_shape=[128,128].json"


def test_device_of_reads_the_device_field():
    assert device_of(E128) == "AMD_Instinct_MI300X"
    assert device_of("E=1,N=2,device_name=AMD_Instinct_MI300X.json") == "AMD_Instinct_MI300X"
    assert device_of("E=1,N=2,dtype=fp8_w8a8.json") is None


def test_retarget_changes_only_the_device_field():
    assert (
        retarget(E128, "AMD_Instinct_MI325X")
        == "E=128,N=384,device_name=AMD_Instinct_MI325X,dtype=fp8_w8a8,block_shape=[128,128].json"
    )
    assert (
        retarget(TABLE_NAME, "AMD_Instinct_MI325X")
        == "E=1,N=2,device_name=AMD_Instinct_MI325X.json"
    )


@pytest.mark.parametrize(
    "name, device, needle",
    [
        ("E=1,N=2.json", "AMD_Instinct_MI325X", "has no device_name= field"),
        (E128, "AMD Instinct MI325X", "is not a vLLM device name"),
        (E128, "../x", "is not a vLLM device name"),
    ],
)
def test_retarget_refuses(name, device, needle):
    with pytest.raises(ValueError, match=needle):
        retarget(name, device)


def test_tables_also_for_adds_a_copy_per_table_and_device(write_spec, project):
    doc = minimal_doc()
    doc["targets"]["t"]["tables_also_for"] = ["AMD_Instinct_MI325X"]
    target = load_spec(write_spec(doc)).target("t")
    source = project / "tuning" / TABLE_NAME
    assert target.tables == (
        Table(source=source, name=TABLE_NAME),
        Table(source=source, name="E=1,N=2,device_name=AMD_Instinct_MI325X.json"),
    )


@pytest.mark.parametrize(
    "value, needles",
    [
        (
            "AMD_Instinct_MI325X",
            ["targets.t.tables_also_for", "expected a list of vLLM device names"],
        ),
        (
            ["AMD Instinct MI325X"],
            [
                "targets.t.tables_also_for[0]",
                "cannot install tables[0]",
                "is not a vLLM device name",
            ],
        ),
        (
            ["AMD_Instinct_MI300X"],
            [
                "targets.t.tables",
                "two tables install under the same name",
                "tables_also_for (copy of " + TABLE_NAME,
            ],
        ),
        ([""], ["targets.t.tables_also_for[0]", "expected a non-empty string"]),
    ],
    ids=["not-a-list", "bad-device", "same-device", "empty"],
)
def test_bad_tables_also_for_is_one_line(write_spec, value, needles):
    doc = minimal_doc()
    doc["targets"]["t"]["tables_also_for"] = value
    path = write_spec(doc)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert_one_line(info.value, str(path), *needles)


def test_table_without_device_field_cannot_be_copied(write_spec, project):
    (project / "tuning" / "E=1,N=2.json").write_text("{}\n")
    doc = minimal_doc()
    doc["targets"]["t"]["tables"] = ["tuning/E=1,N=2.json"]
    doc["targets"]["t"]["tables_also_for"] = ["AMD_Instinct_MI325X"]
    path = write_spec(doc)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert_one_line(
        info.value, "targets.t.tables_also_for[0]", "'E=1,N=2.json' has no device_name= field"
    )


def _lock(tables):
    """The unit tests' fixed lock (tests/unit/fixtures) with ``tables`` as its locked tables."""
    import dataclasses

    from builder.lock import LockedTable, read_lock

    lock = read_lock(Path(__file__).resolve().parents[1] / "unit" / "fixtures" / "fixed.lock.yaml")
    inputs = dataclasses.replace(lock.inputs, tables=tuple(LockedTable(**t) for t in tables))
    return dataclasses.replace(lock, inputs=inputs)


def test_label_records_copies_as_measured_on_their_source_device():
    copy = E128.replace("MI300X", "MI325X")
    labels = image_labels(
        _lock(
            [
                {
                    "file": f"tuning/{E128}",
                    "sha256": "5" * 64,
                    "installs_as": f"model_executor/layers/fused_moe/configs/{E128}",
                },
                {
                    "file": f"tuning/{E128}",
                    "sha256": "5" * 64,
                    "installs_as": f"model_executor/layers/fused_moe/configs/{copy}",
                },
            ]
        ),
        {},
    )
    assert json.loads(labels["io.m3-image.tables.copies"]) == [
        {"file": copy, "sha256": "5" * 64, "copy_of": E128, "measured_on": "AMD_Instinct_MI300X"}
    ]
    assert [t["file"] for t in json.loads(labels["io.m3-image.tables"])] == [E128, E128]


def test_no_copies_no_label():
    labels = image_labels(
        _lock(
            [
                {
                    "file": f"tuning/{E128}",
                    "sha256": "5" * 64,
                    "installs_as": f"model_executor/layers/fused_moe/configs/{E128}",
                }
            ]
        ),
        {},
    )
    assert "io.m3-image.tables.copies" not in labels
