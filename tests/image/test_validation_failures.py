"""Proof the smoke suite can fail: images with a sabotaged patch stack get no tag, and
validation names the check each sabotage breaks. Also: a good image is validated and tagged."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from builder.lock import content_tag, read_lock
from builder.patchstack import apply_stack, load_series

pytestmark = pytest.mark.docker
REPO = Path(__file__).resolve().parents[2]
ORACLE = "vllm/model_executor/layers/fused_moe/oracle/mxfp8.py"
CONVERT = "vllm/model_executor/layers/quantization/utils/mxfp8_block_fp8.py"
CONFIG = "vllm/model_executor/layers/fused_moe/config.py"
FP8_ORACLE = "vllm/model_executor/layers/fused_moe/oracle/fp8.py"
E128 = "E=128,N=384,device_name=AMD_Instinct_MI300X,dtype=fp8_w8a8,block_shape=[128,128].json"


@pytest.fixture(scope="module")
def patched_files(tmp_path_factory):
    """The stand-in's touched files after the real stack: the sabotage patches' pre-image."""
    from standin.vllm_sources import vllm_site

    pristine = vllm_site(REPO / "build" / "cache")
    root = tmp_path_factory.mktemp("stack")
    for rel in (
        ORACLE,
        CONVERT,
        CONFIG,
        FP8_ORACLE,
        "vllm/model_executor/layers/quantization/modelopt.py",
    ):
        if (pristine / rel).exists():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(pristine / rel, root / rel)
    apply_stack(load_series(REPO / "patches" / "series"), root)
    return root


def sabotage_patch(root: Path, rel: str, edit) -> str:
    """A unified diff (real GNU diff) that applies ``edit`` to ``rel`` on top of the stack."""
    before = (root / rel).read_text()
    after = edit(before)
    assert after != before, f"sabotage of {rel} changed nothing: the pattern it targets is gone"
    scratch = root.parent / f"{root.name}-sabotage"
    shutil.rmtree(scratch, ignore_errors=True)
    (scratch / "a" / rel).parent.mkdir(parents=True)
    (scratch / "b" / rel).parent.mkdir(parents=True)
    (scratch / "a" / rel).write_text(before)
    (scratch / "b" / rel).write_text(after)
    diff = subprocess.run(
        ["diff", "-u", f"a/{rel}", f"b/{rel}"], cwd=scratch, capture_output=True, text=True
    )
    assert diff.returncode == 1, diff.stderr
    return "Subject: sabotage for the validation tests\n\n" + diff.stdout


def drop_marker(text: str) -> str:
    return re.sub(r"logger\.info_once\(BACKEND_MARKER\)", "pass", text)


def drop_fnuz(text: str) -> str:
    """FNUZ normalization removed: FN bytes reused with the FN scale (no doubling, 0x80 kept)."""
    text = text.replace("(126 if fnuz else 127)", "127")
    return re.sub(r"q\s*=\s*q\.masked_fill_\(q == 0x80, 0\)", "pass", text)


def drop_swiglu(text: str) -> str:
    return re.sub(r"\n\s*gemm1_alpha=gemm1_alpha,\n\s*gemm1_beta=gemm1_beta,", "", text)


@pytest.fixture
def project_copy(standin_project, tmp_path):
    root = tmp_path / "project"
    shutil.copytree(standin_project, root, ignore=shutil.ignore_patterns("locks"))
    return root


def add_patch(project: Path, name: str, text: str, expect: dict[str, str] | None = None) -> None:
    (project / "patches" / name).write_text(text)
    with (project / "patches" / "series").open("a") as series:
        series.write(f"{name}\n")
    if expect:
        spec = yaml.safe_load((project / "image.yaml").read_text())
        spec["targets"]["standin"]["expect"].update(expect)
        (project / "image.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))


def build_and_validate(builder_cli, project: Path):
    locked = builder_cli(project, "lock", "--target", "standin")
    assert locked.returncode == 0, locked.stderr
    result = builder_cli(project, "image", "--target", "standin", "--rebuild")
    lock = read_lock(project / "locks/standin.lock.yaml").to_doc()
    return result, lock


def assert_refused(result, lock, docker_client, expected: set[str]):
    assert result.returncode == 2, result.stdout + result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1 and "validation failed" in error[0] and "no tag applied" in error[0], (
        result.stderr
    )
    failed = set(re.search(r"validation failed \(([^)]*)\)", error[0]).group(1).split(", "))
    assert expected <= failed, (expected, failed)
    report_dir = Path(re.search(r"report in (\S+)", error[0]).group(1))
    report = json.loads((report_dir / "report.json").read_text())
    assert expected <= set(report["failed_checks"])
    junit = (report_dir / "junit.xml").read_text()
    for name in expected:
        assert re.search(rf'<testcase[^>]*name="{name}"[^>]*>\s*<failure', junit), name
    repository = lock["inputs"]["output"]["repository"]
    for tag in [content_tag(lock), *lock["inputs"]["output"]["aliases"]]:
        try:
            image = docker_client.api.inspect_image(f"{repository}:{tag}")
        except Exception:
            continue
        assert image["Config"]["Labels"].get("io.m3-image.content-tag") != content_tag(lock), tag


def test_marker_missing_fails_backend_marker(
    project_copy, patched_files, builder_cli, docker_client
):
    add_patch(
        project_copy, "0090-drop-marker.patch", sabotage_patch(patched_files, ORACLE, drop_marker)
    )
    assert_refused(
        *build_and_validate(builder_cli, project_copy), docker_client, {"backend_marker_gfx942"}
    )


def test_fnuz_normalization_removed_fails_numerics(
    project_copy, patched_files, builder_cli, docker_client
):
    add_patch(
        project_copy, "0090-drop-fnuz.patch", sabotage_patch(patched_files, CONVERT, drop_fnuz)
    )
    assert_refused(
        *build_and_validate(builder_cli, project_copy), docker_client, {"numerics_vs_native"}
    )


def test_swiglu_params_dropped_fails_swiglu(
    project_copy, patched_files, builder_cli, docker_client
):
    text = sabotage_patch(patched_files, FP8_ORACLE, drop_swiglu)
    add_patch(
        project_copy,
        "0090-drop-swiglu.patch",
        text,
        expect={FP8_ORACLE.split("/", 1)[1]: "1b5030b1"},
    )
    assert_refused(*build_and_validate(builder_cli, project_copy), docker_client, {"swiglu_params"})


def test_misnamed_table_fails_table_checks(project_copy, builder_cli, docker_client):
    wrong = E128.replace("AMD_Instinct_MI300X", "AMD_Instinct_MI300")
    (project_copy / "tuning" / E128).rename(project_copy / "tuning" / wrong)
    spec = yaml.safe_load((project_copy / "image.yaml").read_text())
    target = spec["targets"]["standin"]
    target["tables"] = [t.replace(E128, wrong) for t in target["tables"]]
    del target["expect"][f"model_executor/layers/fused_moe/configs/{E128}"]
    target["expect"][f"model_executor/layers/fused_moe/configs/{wrong}"] = "absent"
    (project_copy / "image.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    assert_refused(
        *build_and_validate(builder_cli, project_copy),
        docker_client,
        {"tables_installed", "tables_lookup"},
    )


def test_good_image_is_validated_then_tagged(standin_project, builder_cli, docker_client):
    result, lock = build_and_validate(builder_cli, standin_project)
    assert result.returncode == 0, result.stderr
    ref, image_id = result.stdout.strip().splitlines()[-1].split()
    repository = lock["inputs"]["output"]["repository"]
    assert ref == f"{repository}:{content_tag(lock)}"
    for tag in [content_tag(lock), *lock["inputs"]["output"]["aliases"]]:
        assert docker_client.api.inspect_image(f"{repository}:{tag}")["Id"] == image_id
    assert "validate: smoke suite inside the image" in result.stderr
