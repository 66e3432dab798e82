"""The patch stack itself: layout, headers, zero-fuzz application, fingerprints."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import PATCHES, read_series, run_patch

# Blob ids (git hash-object) of the vLLM 0.24.0 files the stack touches.
PRISTINE_BLOBS = {
    "vllm/model_executor/layers/fused_moe/oracle/mxfp8.py": "d0d7c764",
    "vllm/model_executor/layers/quantization/modelopt.py": "d51a2dd3",
    "vllm/model_executor/layers/fused_moe/config.py": "d7ad59b4",
    "vllm/model_executor/layers/fused_moe/oracle/fp8.py": "1b5030b1",
    # Same ids at the pinned revision (facts from the brief), not touched:
    "vllm/model_executor/layers/quantization/utils/mxfp8_utils.py": "e6063b46",
    "vllm/model_executor/layers/fused_moe/layer.py": "22548438",
    "vllm/model_executor/layers/fused_moe/fused_moe.py": "49957c8f",
}
PINNED_ONLY = ["0004-pinned-swiglu-oai-block-fp8-passthrough.patch"]


def _blob(path: Path) -> str:
    return subprocess.run(
        ["git", "hash-object", str(path)], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_series_layout():
    series = read_series("series")
    pinned = read_series("series.pinned-4a560dd")
    assert series == [
        "0001-mxfp8-block-fp8-conversion.patch",
        "0002-mxfp8-oracle-triton-block-fp8-on-fnuz.patch",
        "0003-modelopt-mxfp8-moe-convert-to-block-fp8.patch",
    ]
    # Same patches in the same order, plus the pinned-only pass-through.
    assert pinned[: len(series)] == series
    assert pinned[len(series) :] == PINNED_ONLY
    listed = set(series) | set(pinned)
    for ported in PATCHES.glob("series.v*"):  # stacks ported to newer vLLM releases (issue 12)
        listed |= set(read_series(ported.name))
    on_disk = {p.name for p in PATCHES.glob("*.patch")}
    assert on_disk == listed


@pytest.mark.parametrize("name", sorted(p.name for p in PATCHES.glob("*.patch")))
def test_patch_header(name):
    assert re.fullmatch(r"\d{4}-[a-z0-9-]+\.patch", name)
    text = (PATCHES / name).read_text()
    header = text.split("\n--- ", 1)[0]
    assert header.startswith("Subject: ")
    assert re.search(r"^Upstream: vLLM #45726\b", header, re.M)
    assert re.search(r"^Target-Blob: ", header, re.M)
    assert re.search(r"^Verified-Against: ", header, re.M)
    # -p1 at the parent of vllm/
    paths = re.findall(r"^\+\+\+ (\S+)", text, re.M)
    assert paths and all(p.startswith("b/vllm/") for p in paths)


def test_pristine_fingerprints(pristine_site):
    for rel, blob in PRISTINE_BLOBS.items():
        assert _blob(pristine_site / rel).startswith(blob), rel


def test_series_applies_with_zero_fuzz_and_no_offset(pristine_site, tmp_path):
    site = tmp_path
    shutil.copytree(pristine_site / "vllm", site / "vllm")
    for name in read_series("series"):
        r = run_patch(site, PATCHES / name)
        assert r.returncode == 0, r.stdout + r.stderr
        # Clean application: no fuzz, no offsets, no rejects against 0.24.0.
        assert "Hunk" not in r.stdout, r.stdout
    new = site / "vllm/model_executor/layers/quantization/utils/mxfp8_block_fp8.py"
    assert new.is_file()
    # The pristine cache tree is untouched.
    for rel, blob in PRISTINE_BLOBS.items():
        assert _blob(pristine_site / rel).startswith(blob)


def test_pinned_passthrough_is_already_in_0_24_0(pristine_site, tmp_path):
    """Fingerprint: 0004 reverse-applies to 0.24.0 with zero fuzz (0.24.0 has the
    fix) and refuses to apply forward (so it must not be in `series`)."""
    site = tmp_path
    shutil.copytree(pristine_site / "vllm", site / "vllm")
    fwd = run_patch(site, PATCHES / PINNED_ONLY[0], "--dry-run")
    assert fwd.returncode != 0
    assert "Reversed (or previously applied) patch detected" in fwd.stdout
    rev = run_patch(site, PATCHES / PINNED_ONLY[0], "--reverse", "--dry-run")
    assert rev.returncode == 0 and "Hunk" not in rev.stdout, rev.stdout


def _pinned_like(pristine_site: Path, dest: Path) -> Path:
    """0.24.0 with the SwiGLU-OAI block-FP8 pass-through removed: the state the
    pinned config.py/oracle/fp8.py are described to be in."""
    shutil.copytree(pristine_site / "vllm", dest / "vllm")
    r = run_patch(dest, PATCHES / PINNED_ONLY[0], "--reverse")
    assert r.returncode == 0, r.stdout + r.stderr
    return dest


_QCFG_SCRIPT = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, sys.argv[1])
    import vllm
    assert vllm.__file__.startswith(sys.argv[1]), vllm.__file__
    from vllm.model_executor.layers.fused_moe.oracle.fp8 import (
        Fp8MoeBackend, make_fp8_moe_quant_config)
    qc = make_fp8_moe_quant_config(
        fp8_backend=Fp8MoeBackend.TRITON,
        w1_scale=torch.ones(2, 2, 2), w2_scale=torch.ones(2, 2, 2),
        a1_scale=None, a2_scale=None, block_shape=[128, 128],
        swiglu_limit=7.0, gemm1_alpha=1.702, gemm1_beta=1.0)
    print("QCFG", qc.block_shape, qc.gemm1_alpha, qc.gemm1_beta, qc.gemm1_clamp_limit)
""")


def _qcfg(site: Path) -> str:
    r = subprocess.run(
        [sys.executable, "-c", _QCFG_SCRIPT, str(site)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return [ln for ln in r.stdout.splitlines() if ln.startswith("QCFG")][0]


def test_swiglu_oai_reaches_block_fp8_config_on_every_target(pristine_site, patched_site, tmp_path):
    want = "QCFG [128, 128] 1.702 1.0 7.0"
    # vLLM 0.24.0 + series
    assert _qcfg(patched_site) == want
    # Pinned-like tree without the pass-through: the bug (alpha/beta dropped).
    bare = _pinned_like(pristine_site, tmp_path / "bare")
    assert _qcfg(bare) == "QCFG [128, 128] None None 7.0"
    # Pinned-like tree + series.pinned-4a560dd: fixed, zero fuzz.
    site = _pinned_like(pristine_site, tmp_path / "pinned")
    for name in read_series("series.pinned-4a560dd"):
        r = run_patch(site, PATCHES / name)
        assert r.returncode == 0 and "fuzz" not in r.stdout, r.stdout + r.stderr
    assert _qcfg(site) == want
    # ... and the two fixed files are byte-identical to 0.24.0's.
    for rel in (
        "vllm/model_executor/layers/fused_moe/config.py",
        "vllm/model_executor/layers/fused_moe/oracle/fp8.py",
    ):
        assert (site / rel).read_bytes() == (pristine_site / rel).read_bytes()
