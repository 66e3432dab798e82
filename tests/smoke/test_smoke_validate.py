"""builder.validate: the suite runs in a container from a built image, reports come
out through the archive API, the container is removed, and a failing image is
reported by check name (require_passed raises ValidationFailed)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from m3_smoke_testlib import CONFIGS, GOLDEN, SMOKE

from builder.engine import Engine
from builder.errors import ValidationFailed
from builder.image_layout import MANIFEST_PATH, SMOKE_INSTALL
from builder.manifest import tree_manifest
from builder.validate import ValidationResult, _gpu_run_options, require_passed, run_validation
from m3_smoke import CHECK_NAMES

IMAGE_VLLM = "/usr/local/lib/python3.11/dist-packages/vllm"
ORACLE = "model_executor/layers/fused_moe/oracle/mxfp8.py"


def _image_files(tree, *, drop_marker=False) -> dict[str, bytes]:
    files = {}
    for rel in tree.patched:
        data = (tree.vllm / rel).read_bytes()
        if drop_marker and rel == ORACLE:
            data = data.replace(b"        logger.info_once(BACKEND_MARKER)\n", b"")
        files[f"{IMAGE_VLLM}/{rel}"] = data
    for name in tree.tables:
        files[f"{IMAGE_VLLM}/{CONFIGS}/{name}"] = (tree.vllm / CONFIGS / name).read_bytes()
    for p in sorted(SMOKE.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            files[f"{SMOKE_INSTALL}/{p.relative_to(SMOKE).as_posix()}"] = p.read_bytes()
    return files


def _manifest_for(files: dict[str, bytes], tree, tmp: Path) -> bytes:
    """The builder's manifest for these files (fingerprints of what goes in the image)."""
    root = tmp / "vllm"
    for path, data in files.items():
        if path.startswith(IMAGE_VLLM + "/"):
            out = root / path[len(IMAGE_VLLM) + 1 :]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
    m = tree_manifest(
        root,
        tree.patched,
        tree.tables,
        f"{SMOKE_INSTALL}/golden/{GOLDEN.name}",
        vllm_root=IMAGE_VLLM,
        table_devices=tree.table_devices,
    )
    return json.dumps(m, indent=1).encode()


def _build(client, base: str, files: dict[str, bytes], tag: str) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:

        def add(name, data):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))

        add("Dockerfile", f"FROM {base}\nCOPY root/ /\n".encode())
        for path, data in files.items():
            add("root" + path, data)
    buf.seek(0)
    image, _ = client.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True, forcerm=True)
    return image.id


@pytest.fixture(scope="module")
def images(docker_client, standin_base, patched_tree, tmp_path_factory):
    built = {}
    for name, broken in (("good", False), ("no-marker", True)):
        files = _image_files(patched_tree, drop_marker=broken)
        files[str(MANIFEST_PATH)] = _manifest_for(
            files, patched_tree, tmp_path_factory.mktemp(name)
        )
        built[name] = _build(
            docker_client, standin_base.reference, files, f"m3-image-smoke-test:{name}"
        )
    yield built
    for name in built:
        try:
            docker_client.images.remove(f"m3-image-smoke-test:{name}", force=True)
        except Exception:
            pass


def _containers_of(client, image_id):
    return [c for c in client.containers.list(all=True) if c.image.id == image_id]


def test_good_image_passes_and_reports_come_out(docker_client, images, tmp_path):
    lines = []
    result = run_validation(Engine(docker_client), images["good"], tmp_path / "r", log=lines.append)
    assert isinstance(result, ValidationResult)
    assert result.passed is True and result.failed_checks == [] and result.exit_code == 0
    assert result.platform == ("auto" if os.path.exists("/dev/kfd") else "mock")
    assert [c["name"] for c in result.report["checks"]] == list(CHECK_NAMES)
    assert all(c["status"] == "pass" for c in result.report["checks"])
    assert result.report["meta"]["platform_mode"] == result.platform
    assert result.report["meta"]["python"].startswith("3.11")
    on_disk = json.loads((tmp_path / "r" / "report.json").read_text())
    assert on_disk == result.report
    assert b'tests="7" failures="0"' in (tmp_path / "r" / "junit.xml").read_bytes()
    assert [ln for ln in lines if ln.startswith(("PASS", "FAIL"))] == [
        f"PASS {n}" for n in CHECK_NAMES
    ]
    assert _containers_of(docker_client, images["good"]) == []
    assert require_passed(result) is result
    num = next(c for c in result.report["checks"] if c["name"] == "numerics_vs_native")["details"]
    assert 0.04 < num["rel_err_vs_golden"] < 0.08 and num["golden_vs_native_emulation"] == 0.0


def test_broken_image_fails_by_name_and_require_passed_raises(docker_client, images, tmp_path):
    result = run_validation(
        Engine(docker_client),
        images["no-marker"],
        tmp_path / "r",
        log=lambda s: None,
        checks=["fingerprints", "backend_marker_gfx942", "backend_marker_gfx950"],
    )
    assert result.passed is False
    assert result.failed_checks == ["backend_marker_gfx942"]
    assert result.exit_code == 1
    assert json.loads((tmp_path / "r" / "report.json").read_text())["failed_checks"] == [
        "backend_marker_gfx942"
    ]
    assert b'name="backend_marker_gfx942"' in (tmp_path / "r" / "junit.xml").read_bytes()
    assert _containers_of(docker_client, images["no-marker"]) == []
    with pytest.raises(ValidationFailed) as exc:
        require_passed(result)
    assert "validation failed: backend_marker_gfx942" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_image_without_suite_fails_with_suite(docker_client, standin_base, tmp_path):
    """The base image alone (no suite, no manifest): no report comes back; that is a failure."""
    result = run_validation(
        Engine(docker_client), standin_base.reference, tmp_path / "r", log=lambda s: None
    )
    assert result.passed is False and result.failed_checks == ["suite"]
    assert result.exit_code == 1
    assert "No module named m3_smoke" in result.report["error"]
    assert (tmp_path / "r" / "container.log").is_file()


def test_gpu_options_when_rocm_devices_exist(tmp_path):
    assert _gpu_run_options(str(tmp_path)) == {}
    (tmp_path / "dev" / "dri").mkdir(parents=True)
    (tmp_path / "dev" / "kfd").write_text("")
    (tmp_path / "dev" / "dri" / "renderD128").write_text("")
    opts = _gpu_run_options(str(tmp_path))
    assert opts["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    assert opts["ipc_mode"] == "host" and opts["shm_size"] == "16g"
    import grp

    want = {
        str(grp.getgrnam(g).gr_gid)
        for g in ("video", "render")
        if g in {x.gr_name for x in grp.getgrall()}
    }
    assert want <= set(opts["group_add"])
    assert all(g.isdigit() and g != "0" for g in opts["group_add"])


def test_require_passed_is_the_only_raiser():
    bad = ValidationResult(
        image="img", passed=False, failed_checks=["numerics_vs_native", "swiglu_params"], report={}
    )
    with pytest.raises(
        ValidationFailed, match=r"^img: validation failed: numerics_vs_native, swiglu_params$"
    ):
        require_passed(bad)
