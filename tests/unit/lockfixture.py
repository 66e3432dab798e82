"""A fixed lock, built from typed inputs (no files read, no engine): what the byte tests compare.

``tests/unit/fixtures/fixed.lock.{yaml,json}`` and ``fixed.labels.json`` were written from these
very objects by the builder *before* the lock became typed (the dict code path, commit c927689);
the typed code path must reproduce them byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

from builder.base import ResolvedBase
from builder.hashing import Fingerprint
from builder.inputs import Inputs, TableInput
from builder.patchstack import Patch
from builder.spec import BaseImage, Table, Target
from builder.tree import PatchedTree

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# The content tag of the fixed lock: committed, so a change to the canonical form (which would
# silently re-tag every image) fails a test.
FIXED_TAG = "0.22.1rc1.dev490-m3-13deb480b63bef7a"
FIXED_DIGEST = "13deb480b63bef7a75c159ad9a1dee9b391a4c159088087b0f4ffa70e9dc53b6"
FIXED_BUILDER_VERSION = "0.1.0"

ROOT = Path("/nonexistent-project")
H = {c: c * 64 for c in "0123456789abcdef"}
DIGEST_A, DIGEST_B = "sha256:" + "a" * 64, "sha256:" + "b" * 64
TABLE = "E=16,N=3072,device_name=AMD_Instinct_MI300X,dtype=fp8_w8a8,block_shape=[128,128].json"
TABLE_REL = f"model_executor/layers/fused_moe/configs/{TABLE}"


def fixed_target() -> Target:
    return Target(
        name="fixed",
        spec_file=ROOT / "image.yaml",
        description="fixed lock for byte tests",
        base=BaseImage(image="127.0.0.1:5000/m3/base:v1", digest=DIGEST_A, platform="linux/amd64"),
        vllm_root=PurePosixPath("/usr/lib/python3/dist-packages/vllm"),
        python="/usr/bin/python3",
        vllm_version="0.22.1rc1.dev490+g4a560dd8d",
        vllm_revision="4a560dd8db67c270f5e2afb614558271b76f2294",
        series=ROOT / "patches/series",
        expect={},
        tables=(Table(source=ROOT / "tuning" / TABLE, name=TABLE),),
        repository="127.0.0.1:5000/m3/out",
        aliases=("latest", "v1.0"),
        labels={"org.z": "last", "org.a": 'first "q" $x', "b.yes": "true"},
        env={"Z_FLAG": "1", "A": "0755"},
        lock_file=ROOT / "locks/fixed.lock.yaml",
    )


def fixed_inputs() -> Inputs:
    return Inputs(
        target=fixed_target(),
        patches=(
            Patch(
                path=ROOT / "patches/0001-a.patch",
                sha256=H["3"],
                files=("vllm/a.py",),
                upstream="vLLM #45726",
                description="a",
            ),
            Patch(
                path=ROOT / "patches/0002-b.patch",
                sha256=H["4"],
                files=("vllm/new.py",),
                upstream="",
                description="b",
            ),
        ),
        series_sha256=H["2"],
        tables=(TableInput(source=ROOT / "tuning" / TABLE, name=TABLE, sha256=H["5"]),),
        template_sha256=H["6"],
        builder_sha256=H["1"],
        smoke_sha256=H["7"],
    )


def fixed_base() -> ResolvedBase:
    return ResolvedBase(
        image=fixed_target().base,
        manifest_digest=DIGEST_A,
        config_digest=DIGEST_B,
        raw_config=json.dumps({"created": "2025-01-02T03:04:05.123456789Z"}).encode(),
    )


def fixed_tree() -> PatchedTree:
    return PatchedTree(
        parent=ROOT,
        pre={"a.py": Fingerprint("c" * 40, H["8"]), "new.py": None, TABLE_REL: None},
        post={
            "a.py": Fingerprint("d" * 40, H["9"]),
            "new.py": Fingerprint("e" * 40, H["a"]),
            TABLE_REL: Fingerprint("f" * 40, H["b"]),
        },
        modes={},
        outcomes=(),
    )
