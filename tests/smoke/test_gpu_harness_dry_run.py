"""tests/gpu/device_numerics.py on CPU (--cpu-dry-run): the device path of numerics_vs_native
(the image's ModelOpt layer, its load-path conversion, method.apply through vLLM's modular
kernel with TritonExperts) runs end to end with only the Triton GEMM replaced by torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from m3_smoke_testlib import REPO


def test_harness_dry_run(patched_tree, tmp_path):
    out = tmp_path / "dry.json"
    res = subprocess.run(
        [
            sys.executable,
            str(REPO / "tests/gpu/device_numerics.py"),
            "--vllm-site",
            str(patched_tree.site),
            "--cpu-dry-run",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(out.read_text())
    smoke = doc["shapes"]["smoke"]
    assert smoke["device_kernel"] == "TritonExperts via MoEPrepareAndFinalizeNoDPEPModular"
    assert smoke["swiglu_image"] == {"alpha": 1.702, "beta": 1.0, "limit": 7.0, "source": "experts"}
    assert smoke["device_conversion_mismatch"]["total"] == 0
    assert smoke["device_padded_experts_nonzero_bytes"] == 0
    assert smoke["image_vs_emulation"] == 0.0
    assert smoke["device_vs_emulation"] < 0.02 and smoke["gates_failed"] == []
    assert "Using MoEPrepareAndFinalizeNoDPEPModular" in smoke["log"]
    fault = doc["faults"]["alpha_1.0"]
    assert fault["swiglu_image"]["alpha"] == 1.0
    assert fault["device_vs_emulation"] > 0.02 and fault["image_vs_emulation"] > 0.02
    assert any(g.startswith("image_vs_emulation=") for g in fault["gates_failed"])
    assert any(g.startswith("device_vs_emulation=") for g in fault["gates_failed"])
