"""The production definition, end to end on the pinned-faithful stand-in: lock, build, validate
(every smoke check, swiglu_params included), push, verify. And the same definition on plain
vLLM 0.24.0 is refused by its pre-image check.

The project copy keeps image.yaml's ``definitions`` and the ``standin-4a560dd`` target as
committed; only the base digest (inline), the lock path and the output repository (per session)
change, as they may per base.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from builder.lock import content_tag, read_lock_document

REPO = Path(__file__).resolve().parents[2]
TARGET = "standin-4a560dd"
PLAIN = "plain-0-24-0"
CONFIG = "model_executor/layers/fused_moe/config.py"
ORACLE_FP8 = "model_executor/layers/fused_moe/oracle/fp8.py"
MODELOPT = "model_executor/layers/quantization/modelopt.py"
CHECKS = [
    "fingerprints",
    "tables_installed",
    "tables_lookup",
    "backend_marker_gfx942",
    "backend_marker_gfx950",
    "swiglu_params",
    "numerics_vs_native",
]


def builder(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "builder", "--spec", str(project / "image.yaml"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=1200,
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory, registry, standin_base, pinned_base) -> Path:
    root = tmp_path_factory.mktemp("pinned-project")
    for name in ("patches", "tuning"):
        shutil.copytree(REPO / name, root / name)
    spec = yaml.safe_load((REPO / "image.yaml").read_text())
    target = spec["targets"][TARGET]
    target["base"] = {"image": target["base"]["image"], "digest": pinned_base.digest}
    target["lock"] = f"locks/{TARGET}.lock.yaml"
    target["output"]["repository"] = (
        f"{registry}/m3-test-{uuid.uuid4().hex[:8]}/vllm-standin-4a560dd"
    )
    plain = {
        **target,
        "base": {
            "image": "127.0.0.1:5000/m3-image/standin-base:vllm-0.24.0",
            "digest": standin_base.digest,
        },
        "lock": f"locks/{PLAIN}.lock.yaml",
    }
    spec["targets"] = {TARGET: target, PLAIN: plain}
    spec["default_target"] = TARGET
    (root / "image.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return root


@pytest.fixture(scope="module")
def locked(project) -> dict:
    result = builder(project, "lock", "--target", TARGET)
    assert result.returncode == 0, result.stderr
    return read_lock_document(project / "locks" / f"{TARGET}.lock.yaml")


@pytest.fixture(scope="module")
def built(project, locked) -> subprocess.CompletedProcess:
    result = builder(project, "image", "--target", TARGET)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_lock_records_the_pinned_pre_images(locked, pinned_base):
    files = locked["files"]
    assert files[MODELOPT]["pre"]["git_blob"] == "33c7c7532a0ba823e4e7a23538300a5977a4553e"
    assert files[CONFIG]["pre"]["git_blob"] == "0755699d1a4545649e8f5af5de77bbf2c6b24fab"
    assert files[ORACLE_FP8]["pre"]["git_blob"] == "acbf2cb46ad42927fa344363059fe37a970d132b"
    assert files[CONFIG]["post"]["git_blob"].startswith("905a9bea")  # 0004 changed it
    assert files[ORACLE_FP8]["post"]["git_blob"].startswith("1b5030b1")  # 0004 made it 0.24.0's
    assert [p["file"] for p in locked["inputs"]["patches"]][
        -1
    ] == "patches/0004-pinned-swiglu-oai-block-fp8-passthrough.patch"
    assert locked["inputs"]["series"]["file"] == "patches/series.pinned-4a560dd"
    assert locked["base"]["digest"] == pinned_base.digest
    assert locked["vllm"]["version"] == "0.22.1rc1.dev490+g4a560dd8d"


def test_image_applies_0004_and_passes_every_check(built, locked):
    lines = [line.split() for line in built.stderr.splitlines()]
    outcomes = {
        words[1][:4]: words[0] for words in lines if len(words) == 2 and words[1].endswith(".patch")
    }
    assert outcomes == {"0001": "applied", "0002": "applied", "0003": "applied", "0004": "applied"}
    report = json.loads(
        (REPO / "build" / "reports" / TARGET / content_tag(locked) / "report.json").read_text()
    )
    assert report["passed"] is True and report["failed_checks"] == []
    assert [(c["name"], c["status"]) for c in report["checks"]] == [
        (name, "pass") for name in CHECKS
    ]
    swiglu = next(c for c in report["checks"] if c["name"] == "swiglu_params")["details"]
    assert (swiglu["gemm1_alpha"], swiglu["gemm1_beta"], swiglu["gemm1_clamp_limit"]) == (
        1.702,
        1.0,
        7.0,
    )
    reference = f"{locked['inputs']['output']['repository']}:{content_tag(locked)}"
    assert built.stdout.strip().splitlines()[-1].startswith(reference + " sha256:")


def test_push_then_verify(project, built, locked):
    pushed = builder(project, "push", "--target", TARGET)
    assert pushed.returncode == 0, pushed.stderr[-2000:]
    reference = f"{locked['inputs']['output']['repository']}:{content_tag(locked)}"
    assert pushed.stdout.splitlines()[0].startswith(reference + " sha256:")
    verified = builder(project, "verify", "--target", TARGET, reference)
    assert verified.returncode == 0, verified.stderr[-2000:]
    assert f"{reference}: verified against" in verified.stdout


def test_production_definition_refuses_plain_0_24_0(project):
    result = builder(project, "lock", "--target", PLAIN)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr
    assert (
        f"targets.{PLAIN}.expect.{MODELOPT}: expected blob 33c7c753, the base has d51a2dd312af"
    ) in errors[0]
    assert not (project / "locks" / f"{PLAIN}.lock.yaml").exists()
