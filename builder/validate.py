"""Run the in-image smoke suite (``m3_smoke``) in a container and collect its reports.

``run_validation`` never raises for a failing suite: it returns a ``ValidationResult``
(passed, failed check names, the report). ``require_passed`` turns a failed result
into ``ValidationFailed``; the image command calls it before applying any tag.

On a host with ROCm devices (``/dev/kfd``) the container gets /dev/kfd and /dev/dri,
the host groups that own them (video/render), the host IPC namespace and a large
/dev/shm, and the suite runs with ``--platform auto`` (the real GPU). Without them it
runs ``--platform mock`` (vLLM's platform mocked as gfx942 and gfx950).
"""

from __future__ import annotations

import grp
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from builder.engine import Engine
from builder.errors import ValidationFailed
from builder.image_layout import MANIFEST_PATH, SMOKE_INSTALL

SMOKE_PATH = str(SMOKE_INSTALL)
MANIFEST = str(MANIFEST_PATH)
REPORT_DIR_IN_CONTAINER = "/tmp/m3-smoke-report"
REPORT_FILES = ("report.json", "junit.xml")
KFD = "/dev/kfd"
DRI = "/dev/dri"
SHM_SIZE = "16g"
DEFAULT_TIMEOUT_S = 1800


@dataclass
class ValidationResult:
    image: str
    passed: bool
    failed_checks: list[str]
    report: dict
    exit_code: int | None = None
    platform: str = "mock"
    report_dir: Path | None = None
    files: dict[str, Path] = field(default_factory=dict)


def _gpu_run_options(dev_root: str = "/") -> dict:
    """docker-py options passing the ROCm devices, or {} when the host has none."""
    kfd = os.path.join(dev_root, KFD.lstrip("/"))
    if not os.path.exists(kfd):
        return {}
    devices = [f"{KFD}:{KFD}:rwm"]
    dri = os.path.join(dev_root, DRI.lstrip("/"))
    gids: set[int] = set()
    if os.path.isdir(dri):
        devices.append(f"{DRI}:{DRI}:rwm")
        for name in os.listdir(dri):
            try:
                gids.add(os.stat(os.path.join(dri, name)).st_gid)
            except OSError:
                pass
    try:
        gids.add(os.stat(kfd).st_gid)
    except OSError:
        pass
    for group in ("video", "render"):  # numeric: the image may lack these names
        try:
            gids.add(grp.getgrnam(group).gr_gid)
        except KeyError:
            pass
    gids.discard(0)
    return {
        "devices": devices,
        "group_add": [str(g) for g in sorted(gids)],
        "ipc_mode": "host",
        "shm_size": SHM_SIZE,
        "security_opt": ["seccomp=unconfined"],
        "cap_add": ["SYS_PTRACE"],
    }


def run_validation(
    engine: Engine,
    image: str,
    report_dir: Path,
    *,
    log: Callable[[str], None] = print,
    timeout_s: int = DEFAULT_TIMEOUT_S,
    dev_root: str = "/",
    checks: list[str] | None = None,
) -> ValidationResult:
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    for name in (*REPORT_FILES, "container.log"):
        (report_dir / name).unlink(missing_ok=True)
    gpu = _gpu_run_options(dev_root)
    platform = "auto" if gpu else "mock"
    env = dict(
        item.split("=", 1)
        for item in engine.inspect(image)["Config"].get("Env") or []
        if "=" in item
    )
    pythonpath = ":".join(p for p in (SMOKE_PATH, env.get("PYTHONPATH", "")) if p)
    command = [
        "python3",
        "-m",
        "m3_smoke",
        "run",
        "--manifest",
        MANIFEST,
        "--report-dir",
        REPORT_DIR_IN_CONTAINER,
        "--platform",
        platform,
    ]
    if checks:
        command += ["--checks", ",".join(checks)]
    log(
        f"validate {image}: "
        f"{'ROCm devices ' + ', '.join(gpu['devices']) if gpu else 'no /dev/kfd: mocked platform'}"
    )
    run = engine.run(
        image,
        command,
        collect=[f"{REPORT_DIR_IN_CONTAINER}/{name}" for name in REPORT_FILES],
        timeout_s=timeout_s,
        environment={
            "PYTHONPATH": pythonpath,
            "PYTHONDONTWRITEBYTECODE": "1",
            "HF_HUB_OFFLINE": "1",
        },
        **gpu,
    )
    exit_code, output = run.exit_code, run.output
    (report_dir / "container.log").write_text(output)
    for line in output.splitlines():
        if line.startswith(("PASS ", "FAIL ")):
            log(line)
    files = {}
    for name in REPORT_FILES:
        data = run.files.get(f"{REPORT_DIR_IN_CONTAINER}/{name}")
        if data is not None:
            files[name] = report_dir / name
            files[name].write_bytes(data)

    report: dict = {}
    if "report.json" in files:
        try:
            report = json.loads(files["report.json"].read_text())
        except json.JSONDecodeError:
            report = {}
    if not report:
        tail = " | ".join(output.strip().splitlines()[-3:]) if output.strip() else "no output"
        report = {
            "passed": False,
            "failed_checks": ["suite"],
            "checks": [],
            "error": f"no report.json (exit {exit_code}): {tail}",
        }
        (report_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    failed = list(report.get("failed_checks") or [])
    passed = bool(report.get("passed")) and exit_code == 0 and not failed
    if not passed and not failed:
        failed = [f"exit_code={exit_code}"]
    return ValidationResult(
        image=image,
        passed=passed,
        failed_checks=failed,
        report=report,
        exit_code=exit_code,
        platform=platform,
        report_dir=report_dir,
        files=files,
    )


def require_passed(result: ValidationResult) -> ValidationResult:
    """Raise ``ValidationFailed`` (one line, naming the failed checks) unless the suite passed."""
    if not result.passed:
        where = f"; report in {result.report_dir}" if result.report_dir else ""
        raise ValidationFailed(
            f"{result.image}: validation failed: "
            f"{', '.join(result.failed_checks) or 'unknown'}{where}"
        )
    return result
