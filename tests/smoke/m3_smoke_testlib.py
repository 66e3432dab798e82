"""Helpers for the smoke-suite tests: a patched host vLLM tree with the tuned tables,
its manifest, variants broken on purpose, and a runner for ``python -m m3_smoke``.

The patched tree is the pristine vLLM 0.24.0 sources (build/cache, from the
stand-in's wheel) with ``patches/series`` applied by GNU patch exactly as the builder
does. If the series is still empty, the stand-in patch in fixtures/ (same contract)
is applied instead, so the suite itself stays testable.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "smoke"
PRISTINE_SITE = (
    REPO / "build" / "cache" / "vllm-0.24.0" / "site"
)  # filled by ensure_pristine_site()
TUNING = REPO / "tuning"  # the project's tables (byte copies of shared/, see tests/tuning)
TABLES = [
    "E=128,N=384,device_name=AMD_Instinct_MI300X,dtype=fp8_w8a8,block_shape=[128,128].json",
    "E=16,N=3072,device_name=AMD_Instinct_MI300X,dtype=fp8_w8a8,block_shape=[128,128].json",
]
CONFIGS = "model_executor/layers/fused_moe/configs"


def _family_devices() -> list[str]:
    """Devices the stand-in target installs the tables for as well (image.yaml: tables_also_for)."""
    import yaml

    spec = yaml.safe_load((REPO / "image.yaml").read_text())
    return list(spec["targets"]["standin"].get("tables_also_for", []))


def _copies() -> dict[str, str]:
    """Family copies the builder installs: lookup name -> device (builder.table_names)."""
    from builder.table_names import retarget

    return {retarget(name, device): device for device in _family_devices() for name in TABLES}


COPIES = _copies()  # e.g. the MI300X tables under AMD_Instinct_MI325X names
GOLDEN = SMOKE / "golden" / "m3_moe_native_mxfp8.json"

sys.path.insert(0, str(SMOKE))


def ensure_pristine_site() -> Path:
    """The pinned vLLM 0.24.0 wheel's sources (downloaded from PyPI once, then cached)."""
    from standin.vllm_sources import vllm_site

    assert vllm_site(REPO / "build" / "cache") == PRISTINE_SITE
    return PRISTINE_SITE


def apply_series(site: Path) -> list[str]:
    """Apply patches/series with the builder's own patch stack; files touched, under vllm/."""
    from builder.patchstack import apply_stack, load_series, touched_files

    patches = load_series(REPO / "patches" / "series")
    apply_stack(patches, site)
    return [rel.split("/", 1)[1] for rel in touched_files(patches)]


@dataclass
class Tree:
    site: Path  # parent of vllm/: goes on PYTHONPATH
    patched: list[str]
    tables: list[str]
    manifest: Path

    @property
    def vllm(self) -> Path:
        return self.site / "vllm"

    @property
    def table_devices(self) -> dict[str, str]:
        return {name: device for name, device in COPIES.items() if name in self.tables}

    def write_manifest(self, **overrides) -> Path:
        from builder.manifest import tree_manifest

        m = tree_manifest(
            self.vllm,
            [p for p in self.patched if (self.vllm / p).exists()],
            self.tables,
            GOLDEN,
            table_devices=self.table_devices,
        )
        m.update(overrides)
        self.manifest.write_text(json.dumps(m, indent=1))
        return self.manifest


def install_tables(vllm: Path) -> list[str]:
    """The measured tables under their own names, then their family copies (same bytes)."""
    for name in TABLES:
        shutil.copyfile(TUNING / name, vllm / CONFIGS / name)
        for copy, device in COPIES.items():
            if copy == _retarget(name, device):
                shutil.copyfile(TUNING / name, vllm / CONFIGS / copy)
    return list(TABLES) + list(COPIES)


def _retarget(name: str, device: str) -> str:
    from builder.table_names import retarget

    return retarget(name, device)


def replace_file(path: Path, text: str) -> None:
    """Write a new inode (the variant trees share inodes with the patched tree)."""
    path.unlink()
    path.write_text(text)


@dataclass
class SuiteRun:
    rc: int
    stdout: str
    stderr: str
    report: dict
    report_dir: Path

    @property
    def failed(self) -> list[str]:
        return self.report.get("failed_checks", [])

    def check(self, name: str) -> dict:
        return next(c for c in self.report["checks"] if c["name"] == name)

    def lines(self) -> list[str]:
        return [ln for ln in self.stdout.splitlines() if ln.startswith(("PASS ", "FAIL "))]


def run_suite(
    tree: Tree, report_dir: Path, *, checks=None, platform="mock", manifest=None
) -> SuiteRun:
    env = {**os.environ, "PYTHONPATH": f"{tree.site}:{SMOKE}", "VLLM_LOGGING_LEVEL": "WARNING"}
    env.pop("VLLM_TUNED_CONFIG_FOLDER", None)
    cmd = [
        sys.executable,
        "-m",
        "m3_smoke",
        "run",
        "--manifest",
        str(manifest or tree.manifest),
        "--report-dir",
        str(report_dir),
        "--platform",
        platform,
    ]
    if checks:
        cmd += ["--checks", ",".join(checks)]
    res = subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=900, cwd=str(report_dir.parent)
    )
    rj = report_dir / "report.json"
    report = json.loads(rj.read_text()) if rj.is_file() else {}
    return SuiteRun(res.returncode, res.stdout, res.stderr, report, report_dir)
