"""The manifest validator rejects a malformed manifest with one line naming the key."""

from __future__ import annotations

import copy
import json

import pytest

from m3_smoke.manifest import DEFAULT_THRESHOLDS, ManifestError, load_manifest, validate_manifest

GOOD = {
    "schema": 1,
    "vllm_root": "/usr/local/lib/python3.11/dist-packages/vllm",
    "patched_files": {
        "model_executor/layers/fused_moe/oracle/mxfp8.py": {
            "sha256": "a" * 64,
            "git_blob": "b" * 40,
        }
    },
    "tables": [
        {
            "file": (
                "E=128,N=384,device_name=AMD_Instinct_MI300X,"
                "dtype=fp8_w8a8,block_shape=[128,128].json"
            ),
            "sha256": "c" * 64,
            "E": 128,
            "N": 384,
        }
    ],
    "device_name": "AMD_Instinct_MI300X",
    "golden": "/opt/m3-image/smoke/golden/m3_moe_native_mxfp8.json",
    "thresholds": {"rel_err_vs_golden": 0.08},
}


def test_good_manifest_gets_defaults():
    m = validate_manifest(copy.deepcopy(GOOD))
    assert m["thresholds"]["rel_err_vs_golden"] == 0.08
    assert m["thresholds"]["rel_err_vs_bf16"] == DEFAULT_THRESHOLDS["rel_err_vs_bf16"] == 0.11
    assert m["thresholds"]["rel_err_weights"] == 0.05
    assert m["required_tables"] == [(128, 384), (16, 3072)]


def _broken(path, value):
    m = copy.deepcopy(GOOD)
    node = m
    for k in path[:-1]:
        node = node[k]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return m


@pytest.mark.parametrize(
    "path,value,key",
    [
        (("schema",), 2, "'schema'"),
        (("schema",), KeyError, "'schema': missing"),
        (("vllm_root",), "relative/vllm", "'vllm_root'"),
        (("patched_files",), {}, "'patched_files': empty"),
        (
            ("patched_files", "model_executor/layers/fused_moe/oracle/mxfp8.py", "sha256"),
            "xyz",
            "patched_files['model_executor/layers/fused_moe/oracle/mxfp8.py'].sha256",
        ),
        (
            ("patched_files", "model_executor/layers/fused_moe/oracle/mxfp8.py", "git_blob"),
            KeyError,
            "patched_files['model_executor/layers/fused_moe/oracle/mxfp8.py'].git_blob': missing",
        ),
        (("tables", 0, "E"), "128", "'tables[0].E': expected int, got str"),
        (("tables", 0, "N"), True, "'tables[0].N': expected int, got bool"),
        (("tables", 0, "file"), "configs/x.json", "'tables[0].file'"),
        (("device_name",), KeyError, "'device_name': missing"),
        (("golden",), None, "'golden': expected str, got NoneType"),
        (
            ("thresholds", "rel_err_vs_golden"),
            3,
            "'thresholds.rel_err_vs_golden': must be in (0, 1)",
        ),
        (("thresholds", "bogus"), 0.1, "'thresholds.bogus': unknown"),
    ],
)
def test_malformed_manifest_names_the_key(path, value, key):
    with pytest.raises(ManifestError) as exc:
        validate_manifest(_broken(path, value))
    msg = str(exc.value)
    assert "\n" not in msg
    assert key in msg, msg


def test_unreadable_and_invalid_json(tmp_path):
    with pytest.raises(ManifestError, match="cannot read"):
        load_manifest(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text('{"schema": 1,')
    with pytest.raises(ManifestError, match="invalid JSON at line 1"):
        load_manifest(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text(json.dumps([1]))
    with pytest.raises(ManifestError, match="expected a JSON object"):
        load_manifest(tmp_path / "list.json")


def test_cli_reports_malformed_manifest(tmp_path, patched_tree, suite):
    bad = tmp_path / "m.json"
    bad.write_text(json.dumps(_broken(("tables", 0, "sha256"), "zz")))
    run = suite(patched_tree, manifest=bad)
    assert run.rc == 2
    assert run.lines() == [
        "FAIL manifest: manifest key 'tables[0].sha256': expected 64 lowercase hex digits"
    ]
    assert run.report["passed"] is False and run.failed == ["manifest"]
