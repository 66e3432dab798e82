"""The gfx942 family in the smoke suite: vLLM's own lookup, with the device mocked as
AMD_Instinct_MI325X, returns the MI300X-measured tables installed under the MI325X names; a
missing or wrong copy fails tables_installed / tables_lookup by device name."""

from __future__ import annotations

from m3_smoke_testlib import CONFIGS, COPIES, TUNING

E128 = "E=128,N=384,device_name=AMD_Instinct_MI300X,dtype=fp8_w8a8,block_shape=[128,128].json"
E128_MI325X = (
    "E=128,N=384,device_name=AMD_Instinct_MI325X,dtype=fp8_w8a8,block_shape=[128,128].json"
)
E16_MI325X = "E=16,N=3072,device_name=AMD_Instinct_MI325X,dtype=fp8_w8a8,block_shape=[128,128].json"


def test_stand_in_target_installs_mi325x_copies():
    assert COPIES == {E128_MI325X: "AMD_Instinct_MI325X", E16_MI325X: "AMD_Instinct_MI325X"}


def test_lookup_for_mi325x_returns_the_mi300x_measured_tables(patched_tree, suite):
    assert (patched_tree.vllm / CONFIGS / E128_MI325X).read_bytes() == (TUNING / E128).read_bytes()
    run = suite(patched_tree, checks=["tables_installed", "tables_lookup"])
    assert run.rc == 0, run.stdout + run.stderr[-2000:]
    inst = run.check("tables_installed")["details"]
    assert list(inst) == [
        "E=16,N=3072",
        "E=128,N=384",
        "AMD_Instinct_MI325X:E=16,N=3072",
        "AMD_Instinct_MI325X:E=128,N=384",
    ]
    assert inst["AMD_Instinct_MI325X:E=128,N=384"] == {
        "file": E128_MI325X,
        "batch_sizes": inst["E=128,N=384"]["batch_sizes"],
    }
    look = run.check("tables_lookup")["details"]
    assert look["AMD_Instinct_MI325X:E=128,N=384"]["device_name"] == "AMD_Instinct_MI325X"
    assert look["AMD_Instinct_MI325X:E=128,N=384"]["loaded_from"].endswith(
        f"{CONFIGS}/{E128_MI325X}"
    )
    assert look["AMD_Instinct_MI325X:E=16,N=3072"]["loaded_from"].endswith(
        f"{CONFIGS}/{E16_MI325X}"
    )
    assert look["AMD_Instinct_MI325X:E=16,N=3072"]["batch_sizes"] == 14
    assert look["E=128,N=384"]["loaded_from"].endswith(f"{CONFIGS}/{E128}")


def test_missing_mi325x_copy_fails_both_table_checks(variant, suite):
    """The manifest still lists the copy (the builder recorded it), the file is gone:
    vLLM's lookup for MI325X falls back to its default config."""
    tree = variant(lambda t: None)
    (tree.vllm / CONFIGS / E128_MI325X).unlink()  # after the builder wrote the manifest
    run = suite(tree, checks=["tables_installed", "tables_lookup"])
    assert run.rc == 1 and run.failed == ["tables_installed", "tables_lookup"]
    inst, look = run.lines()
    assert inst.startswith(f"FAIL tables_installed: {E128_MI325X} not installed in {CONFIGS}/")
    assert "required table E=128,N=384 for AMD_Instinct_MI325X not verified" in inst
    assert look.startswith(
        "FAIL tables_lookup: AMD_Instinct_MI325X:E=128,N=384: manifest table "
        f"{E128_MI325X} unreadable"
    )


def test_device_without_its_tables_fails(variant, suite):
    """The manifest requires the tables for MI325X (device_names) but the image has none."""

    def drop(t):
        for name in COPIES:
            (t.vllm / CONFIGS / name).unlink()
        t.tables = [n for n in t.tables if n not in COPIES]

    tree = variant(drop)
    import json

    m = json.loads(tree.manifest.read_text())
    m["device_names"] = ["AMD_Instinct_MI300X", "AMD_Instinct_MI325X"]
    tree.manifest.write_text(json.dumps(m))
    run = suite(tree, checks=["tables_installed", "tables_lookup"])
    assert run.failed == ["tables_installed", "tables_lookup"]
    inst, look = run.lines()
    assert inst == (
        f"FAIL tables_installed: required table E=128,N=384 for AMD_Instinct_MI325X not verified "
        f"({E128_MI325X} not installed); required table E=16,N=3072 for AMD_Instinct_MI325X not "
        f"verified ({E16_MI325X} not installed)"
    )
    assert look.startswith(
        "FAIL tables_lookup: AMD_Instinct_MI325X:E=128,N=384: no table in manifest"
    )


def test_without_copies_only_the_target_device_is_checked(variant, suite):
    tree = variant(lambda t: setattr(t, "tables", [n for n in t.tables if n not in COPIES]))
    assert "AMD_Instinct_MI325X" not in tree.manifest.read_text()
    run = suite(tree, checks=["tables_installed", "tables_lookup"])
    assert run.rc == 0
    assert not any(
        k.startswith("AMD_Instinct_MI325X") for k in run.check("tables_lookup")["details"]
    )
