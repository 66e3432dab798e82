"""builder.manifest: the one producer of /opt/m3-image/manifest.json, checked by the suite's
validator."""

from __future__ import annotations

import json

import pytest
from lockfixture import FIXTURES, fixed_inputs, fixed_tree

from builder.context import smoke_manifest
from builder.hashing import Fingerprint
from builder.manifest import image_manifest, tree_manifest
from m3_smoke.manifest import ManifestError, validate_manifest

TABLE = "E=128,N=384,device_name=AMD_Instinct_MI300X,dtype=fp8_w8a8,block_shape=[128,128].json"


def test_image_manifest_is_byte_identical_to_the_earlier_producer():
    # fixed.manifest.json: what builder.context wrote before the producer moved to builder.manifest
    text = json.dumps(smoke_manifest(fixed_inputs(), fixed_tree()), indent=2, sort_keys=True) + "\n"
    assert text == (FIXTURES / "fixed.manifest.json").read_text()


def test_tree_manifest_fingerprints_a_host_tree_and_passes_the_validator(tmp_path):
    vllm = tmp_path / "vllm"
    (vllm / "model_executor/layers/fused_moe/configs").mkdir(parents=True)
    (vllm / "a.py").write_bytes(b"x = 1\n")
    (vllm / "model_executor/layers/fused_moe/configs" / TABLE).write_bytes(b"{}\n")
    doc = tree_manifest(
        vllm, ["a.py"], [TABLE], "/opt/m3-image/smoke/golden/g.json", vllm_root="/image/vllm"
    )
    assert doc["vllm_root"] == "/image/vllm"
    # values from `git hash-object` and `sha256sum`, not from the code under test
    assert doc["patched_files"] == {
        "a.py": {
            "git_blob": "7d4290a117a4ddcc11daae7ea675841033830c8f",
            "sha256": "9e26bf369911c45c243c684147b23fc9e1dcfcf257d299a1c632016a6fcd33f4",
        }
    }
    assert doc["tables"] == [
        {
            "file": TABLE,
            "sha256": "ca3d163bab055381827226140568f3bef7eaac187cebd76878e0b63e9e442356",
            "E": 128,
            "N": 384,
        }
    ]
    validated = validate_manifest(doc)
    assert validated["required_tables"] == [(128, 384), (16, 3072)]


def test_files_absent_after_the_stack_are_left_out_and_a_misnamed_table_is_refused_by_the_suite():
    doc = image_manifest(
        target="t",
        vllm_root="/v/vllm",
        patched_files={"gone.py": None, "a.py": Fingerprint("a" * 40, "b" * 64)},
        tables=[("wrong-name.json", "c" * 64)],
        golden="/g.json",
    )
    assert list(doc["patched_files"]) == ["a.py"]
    assert doc["tables"] == [{"file": "wrong-name.json", "sha256": "c" * 64, "E": None, "N": None}]
    with pytest.raises(ManifestError, match=r"tables\[0\]\.E"):
        validate_manifest(doc)


def test_family_copies_name_their_device_and_the_manifest_lists_every_device():
    copy = TABLE.replace("MI300X", "MI325X")
    doc = image_manifest(
        target="t",
        vllm_root="/v/vllm",
        patched_files={},
        golden="/g.json",
        tables=[(TABLE, "1" * 64), (copy, "1" * 64)],
        table_devices={copy: "AMD_Instinct_MI325X"},
    )
    assert [(t["file"], t["device_name"]) for t in doc["tables"]] == [
        (TABLE, "AMD_Instinct_MI300X"),
        (copy, "AMD_Instinct_MI325X"),
    ]
    assert doc["device_names"] == ["AMD_Instinct_MI300X", "AMD_Instinct_MI325X"]
    plain = image_manifest(
        target="t",
        vllm_root="/v/vllm",
        patched_files={},
        golden="/g.json",
        tables=[(TABLE, "1" * 64)],
    )
    assert "device_names" not in plain and "device_name" not in plain["tables"][0]


def test_context_marks_the_spec_copies_with_their_device():
    import dataclasses

    from builder.inputs import TableInput

    inputs = fixed_inputs()
    [first, *_] = inputs.tables
    copy = TableInput(
        source=first.source, name=first.name.replace("MI300X", "MI325X"), sha256=first.sha256
    )
    doc = smoke_manifest(dataclasses.replace(inputs, tables=(*inputs.tables, copy)), fixed_tree())
    assert doc["device_names"] == ["AMD_Instinct_MI300X", "AMD_Instinct_MI325X"]
    assert [t["device_name"] for t in doc["tables"]] == ["AMD_Instinct_MI300X"] * len(
        inputs.tables
    ) + ["AMD_Instinct_MI325X"]
