"""The pinned revision's bytes, rebuilt from the vLLM 0.24.0 wheel and the committed diff (no
engine).

Real vLLM 0.24.0 sources from PyPI (build/cache, downloaded when missing), real GNU patch.
Shows that the two trees really differ where it matters: the production stack's 0004 is
"applied" on the pinned tree and "already applied" on plain 0.24.0, and the production
``expect`` block refuses plain 0.24.0.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from builder.errors import BuilderError, PatchError
from builder.hashing import git_blob_id, sha256_file
from builder.inputs import collect_inputs
from builder.patchstack import apply_stack, load_series
from builder.spec import load_spec
from builder.tree import Fingerprint, check_expectations
from standin.pinned import DATA_DIR, PROVENANCE, load_reconstruction, reconstruct
from standin.vllm_sources import vllm_site

REPO = Path(__file__).resolve().parents[2]
CONFIG = "model_executor/layers/fused_moe/config.py"
ORACLE_FP8 = "model_executor/layers/fused_moe/oracle/fp8.py"
MODELOPT = "model_executor/layers/quantization/modelopt.py"
PINNED = {
    CONFIG: "0755699d1a4545649e8f5af5de77bbf2c6b24fab",
    ORACLE_FP8: "acbf2cb46ad42927fa344363059fe37a970d132b",
    MODELOPT: "33c7c7532a0ba823e4e7a23538300a5977a4553e",
}
V0240 = {CONFIG: "d7ad59b4", ORACLE_FP8: "1b5030b1", MODELOPT: "d51a2dd3"}
# What the production stack leaves in the two 0004 files on the pinned tree (measured, see
# the data drop's README): config.py is new bytes, oracle/fp8.py becomes 0.24.0's.
AFTER_0004 = {CONFIG: "905a9bea", ORACLE_FP8: "1b5030b1"}


@pytest.fixture(scope="module")
def plain_site() -> Path:
    site = vllm_site(REPO / "build" / "cache")
    assert (site / "vllm" / "__init__.py").is_file()
    return site


def _stack_files(site: Path, series: Path, out: Path) -> Path:
    """Copy the files the series touches (as -p1 sees them) from ``site`` into ``out``."""
    for rel in {f for p in load_series(series) for f in p.files}:
        if (site / rel).is_file():
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(site / rel, out / rel)
    return out


@pytest.fixture(scope="module")
def pinned_files(plain_site, tmp_path_factory) -> dict[str, bytes]:
    files = {rel: (plain_site / "vllm" / rel).read_bytes() for rel in PINNED}
    return reconstruct(files, tmp_path_factory.mktemp("reconstruct"))


def test_provenance_records_the_committed_diff():
    rec = load_reconstruction()
    assert rec.diff == DATA_DIR / "vllm-0.24.0-to-4a560dd.diff"
    assert (
        rec.sha256
        == sha256_file(rec.diff)
        == "893dd9ba1cd52911970a5dc8eceae1693a134c029b497b9c8a87a9024177f633"
    )
    assert {rel: post for rel, (_, post) in rec.files.items()} == PINNED
    assert all(pre.startswith(V0240[rel]) for rel, (pre, _) in rec.files.items())
    assert rec.commit == "4a560dd8db67c270f5e2afb614558271b76f2294"
    spec = yaml.safe_load((REPO / "image.yaml").read_text())
    definition = spec["definitions"]["minimax-m3-mi300x"]
    assert (
        rec.version == definition["vllm"]["version"]
        and rec.commit == definition["vllm"]["revision"]
    )


def test_a_changed_diff_is_refused(tmp_path):
    shutil.copytree(DATA_DIR, tmp_path / "data")
    diff = tmp_path / "data" / "vllm-0.24.0-to-4a560dd.diff"
    diff.write_bytes(diff.read_bytes().replace(b"return 89", b"return 90"))
    with pytest.raises(BuilderError) as info:
        load_reconstruction(tmp_path / "data" / PROVENANCE.name)
    text = str(info.value)
    assert "\n" not in text
    assert str(diff) in text and "does not match 893dd9ba1cd5" in text and "PROVENANCE.yaml" in text


def test_reconstruction_gives_the_pinned_blobs(pinned_files):
    assert {rel: git_blob_id(data) for rel, data in pinned_files.items()} == PINNED


def test_reconstruction_refuses_a_base_that_is_not_0_24_0(pinned_files, tmp_path):
    with pytest.raises(BuilderError) as info:
        reconstruct(dict(pinned_files), tmp_path)  # already the pinned bytes
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(
        "stand-in base: model_executor/layers/fused_moe/config.py: "
        "blob 0755699d1a4545649e8f5af5de77bbf2c6b24fab, "
        "expected vLLM 0.24.0 blob d7ad59b46cda6a635ae7a0270c363a5544f68e63"
    )


def test_reconstruction_refuses_a_result_that_is_not_the_pinned_blob(plain_site, tmp_path):
    shutil.copytree(DATA_DIR, tmp_path / "data")
    provenance = tmp_path / "data" / PROVENANCE.name
    provenance.write_text(
        provenance.read_text().replace("post: 33c7c7532a0ba823", "post: 33c7c7532a0ba824")
    )
    files = {rel: (plain_site / "vllm" / rel).read_bytes() for rel in PINNED}
    with pytest.raises(BuilderError) as info:
        reconstruct(files, tmp_path / "work", load_reconstruction(provenance))
    text = str(info.value)
    assert "\n" not in text
    assert text == (
        "vllm-0.24.0-to-4a560dd.diff: model_executor/layers/quantization/modelopt.py: "
        "blob 33c7c7532a0ba823e4e7a23538300a5977a4553e, "
        "expected pinned 4a560dd blob 33c7c7532a0ba824e4e7a23538300a5977a4553e"
    )


def _pinned_tree(plain_site: Path, pinned_files: dict[str, bytes], out: Path) -> Path:
    _stack_files(plain_site, REPO / "patches" / "series.pinned-4a560dd", out)
    for rel, data in pinned_files.items():
        (out / "vllm" / rel).write_bytes(data)
    return out


def test_production_stack_on_the_pinned_tree(plain_site, pinned_files, tmp_path):
    tree = _pinned_tree(plain_site, pinned_files, tmp_path / "pinned")
    outcomes = apply_stack(load_series(REPO / "patches" / "series.pinned-4a560dd"), tree)
    assert [(o.patch.name[:4], o.result) for o in outcomes] == [
        ("0001", "applied"),
        ("0002", "applied"),
        ("0003", "applied"),
        ("0004", "applied"),
    ]
    # Zero fuzz everywhere; 0003's two hunks land 6 lines earlier than in 0.24.0; 0004 no offset.
    assert all("fuzz" not in o.detail for o in outcomes)
    assert outcomes[2].detail.count("(offset -6 lines)") == 2, outcomes[2].detail
    assert "offset" not in outcomes[1].detail and "offset" not in outcomes[3].detail
    for rel, blob in AFTER_0004.items():
        assert git_blob_id((tree / "vllm" / rel).read_bytes()).startswith(blob)


def test_production_stack_on_plain_0_24_0(plain_site, tmp_path):
    tree = _stack_files(plain_site, REPO / "patches" / "series.pinned-4a560dd", tmp_path / "plain")
    outcomes = apply_stack(load_series(REPO / "patches" / "series.pinned-4a560dd"), tree)
    assert [(o.patch.name[:4], o.result) for o in outcomes] == [
        ("0001", "applied"),
        ("0002", "applied"),
        ("0003", "applied"),
        ("0004", "already-applied"),
    ]


def _production_target(tmp_path: Path):
    """The repo's standin-4a560dd target (production definition), pinned inline to a dummy
    digest."""
    for name in ("patches", "tuning"):
        shutil.copytree(REPO / name, tmp_path / name)
    spec = yaml.safe_load((REPO / "image.yaml").read_text())
    target = spec["targets"]["standin-4a560dd"]
    target["base"] = {"image": target["base"]["image"], "digest": "sha256:" + "0" * 64}
    spec["targets"] = {"standin-4a560dd": target}
    spec["default_target"] = "standin-4a560dd"
    (tmp_path / "image.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return load_spec(tmp_path / "image.yaml").target(None)


def _pre_images(site: Path, inputs) -> dict[str, Fingerprint | None]:
    pre = {}
    for rel in inputs.target.expect:
        path = site / "vllm" / rel
        pre[rel] = Fingerprint.of(path.read_bytes()) if path.is_file() else None
    return pre


def test_production_expect_block_refuses_plain_0_24_0(plain_site, tmp_path):
    inputs = collect_inputs(_production_target(tmp_path))
    with pytest.raises(PatchError) as info:
        check_expectations(inputs, _pre_images(plain_site, inputs))
    text = str(info.value)
    assert "\n" not in text
    assert (
        f"targets.standin-4a560dd.expect.{MODELOPT}: expected blob 33c7c753, the base has "
        "d51a2dd312af" in text
    )


def test_production_expect_block_accepts_the_pinned_tree(plain_site, pinned_files, tmp_path):
    inputs = collect_inputs(_production_target(tmp_path / "project"))
    site = tmp_path / "site"
    for rel in inputs.target.expect:
        if (plain_site / "vllm" / rel).is_file():
            (site / "vllm" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(plain_site / "vllm" / rel, site / "vllm" / rel)
    for rel, data in pinned_files.items():
        (site / "vllm" / rel).write_bytes(data)
    check_expectations(inputs, _pre_images(site, inputs))  # no error


_QCFG = """
import sys, torch
sys.path.insert(0, sys.argv[1])
import vllm
assert vllm.__file__.startswith(sys.argv[1]), vllm.__file__
from vllm.model_executor.layers.fused_moe.oracle.fp8 import Fp8MoeBackend, make_fp8_moe_quant_config
qc = make_fp8_moe_quant_config(
    fp8_backend=Fp8MoeBackend.TRITON, w1_scale=torch.ones(2, 2, 2), w2_scale=torch.ones(2, 2, 2),
    a1_scale=None, a2_scale=None, block_shape=[128, 128], swiglu_limit=7.0, gemm1_alpha=1.702,
    gemm1_beta=1.0)
print("QCFG", qc.block_shape, qc.gemm1_alpha, qc.gemm1_beta, qc.gemm1_clamp_limit)
"""


def _quant_config(site: Path) -> str:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", _QCFG, str(site)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return next(line for line in result.stdout.splitlines() if line.startswith("QCFG"))


def test_on_the_pinned_tree_swiglu_params_need_0004(plain_site, pinned_files, tmp_path):
    """What the in-image swiglu_params check sees, on the real pinned bytes: without 0004 the
    block-FP8 quant config drops alpha/beta; with the production series it carries them."""
    import os

    site = tmp_path / "site"
    # A shadow tree: real folders, links to 0.24.0's files, real copies of the files touched here.
    touched = {f for p in load_series(REPO / "patches" / "series.pinned-4a560dd") for f in p.files}
    for dirpath, dirnames, filenames in os.walk(plain_site / "vllm"):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        rel_dir = Path(dirpath).relative_to(plain_site)
        (site / rel_dir).mkdir(parents=True, exist_ok=True)
        for name in filenames:
            (site / rel_dir / name).symlink_to(Path(dirpath) / name)
    for rel in touched:
        if (site / rel).is_symlink():
            (site / rel).unlink()
            shutil.copy2(plain_site / rel, site / rel)
    for rel, data in pinned_files.items():
        (site / "vllm" / rel).write_bytes(data)
    patches = load_series(REPO / "patches" / "series.pinned-4a560dd")
    assert patches[-1].name.startswith("0004-")
    apply_stack(patches[:-1], site)
    assert _quant_config(site) == "QCFG [128, 128] None None 7.0"
    assert [o.result for o in apply_stack(patches[-1:], site)] == ["applied"]
    assert _quant_config(site) == "QCFG [128, 128] 1.702 1.0 7.0"
