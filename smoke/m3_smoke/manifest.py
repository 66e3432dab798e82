"""The image manifest (/opt/m3-image/manifest.json) and its validator.

The builder writes the manifest (``builder.manifest``); the suite only reads and checks it.

A malformed manifest is rejected with a one-line ``ManifestError`` naming the key.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
HEX64 = re.compile(r"^[0-9a-f]{64}$")
HEX40 = re.compile(r"^[0-9a-f]{40}$")

# Gates for the numerical check; see docs/validation.md for the measurements.
DEFAULT_THRESHOLDS = {
    # relative Frobenius error of the converted block-FP8 path vs the native
    # MI355X MXFP8 golden output
    "rel_err_vs_golden": 1.3e-1,
    # relative Frobenius error of the converted path vs the BF16 reference
    "rel_err_vs_bf16": 1.1e-1,
    # relative Frobenius error of the converted weights vs the MXFP8 weights
    "rel_err_weights": 5e-2,
    # the same, for the worst single 128x128 tile (one tile's scale off by 2x: 1.0)
    "max_tile_rel_err_weights": 1e-1,
    # the converted path emulated with the SwiGLU-OAI parameters of the image's MoE
    # kernel vs with the MiniMax-M3 reference parameters (exactly 0 when they agree)
    "image_vs_emulation": 5e-3,
    # on a GPU: the image's kernel on the device vs the reference emulation
    "device_vs_emulation": 5e-3,
}

# The tuned tables the issue requires (TP8: E=128,N=384; TP8+EP8: E=16,N=3072).
DEFAULT_REQUIRED_TABLES = ((128, 384), (16, 3072))


class ManifestError(Exception):
    """One line, naming the manifest key at fault."""


def _fail(key: str, what: str) -> None:
    raise ManifestError(f"manifest key '{key}': {what}")


def _expect(obj: Any, key: str, typ, path: str):
    if not isinstance(obj, dict) or key not in obj:
        _fail(path, "missing")
    val = obj[key]
    if typ is int and isinstance(val, bool):
        _fail(path, f"expected int, got {type(val).__name__}")
    if typ is float:
        if isinstance(val, bool) or not isinstance(val, (int, float)):
            _fail(path, f"expected number, got {type(val).__name__}")
    elif not isinstance(val, typ):
        _fail(path, f"expected {getattr(typ, '__name__', typ)}, got {type(val).__name__}")
    return val


def validate_manifest(data: Any) -> dict:
    """Validate a parsed manifest; return it with defaults filled in."""
    if not isinstance(data, dict):
        raise ManifestError(f"manifest: expected a JSON object, got {type(data).__name__}")
    schema = _expect(data, "schema", int, "schema")
    if schema != SCHEMA_VERSION:
        _fail("schema", f"unsupported schema {schema} (expected {SCHEMA_VERSION})")
    root = _expect(data, "vllm_root", str, "vllm_root")
    if not root.startswith("/"):
        _fail("vllm_root", "must be an absolute path")
    pf = _expect(data, "patched_files", dict, "patched_files")
    if not pf:
        _fail("patched_files", "empty")
    for rel, entry in pf.items():
        p = f"patched_files[{rel!r}]"
        if rel.startswith("/") or ".." in Path(rel).parts:
            _fail(p, "path must be relative to vllm_root")
        if not isinstance(entry, dict):
            _fail(p, "expected object")
        if not HEX64.match(_expect(entry, "sha256", str, f"{p}.sha256")):
            _fail(f"{p}.sha256", "expected 64 lowercase hex digits")
        if not HEX40.match(_expect(entry, "git_blob", str, f"{p}.git_blob")):
            _fail(f"{p}.git_blob", "expected 40 lowercase hex digits")
    tables = _expect(data, "tables", list, "tables")
    if not tables:
        _fail("tables", "empty")
    for i, t in enumerate(tables):
        p = f"tables[{i}]"
        if not isinstance(t, dict):
            _fail(p, "expected object")
        name = _expect(t, "file", str, f"{p}.file")
        if "/" in name or not name.endswith(".json"):
            _fail(f"{p}.file", "expected a bare *.json file name")
        if not HEX64.match(_expect(t, "sha256", str, f"{p}.sha256")):
            _fail(f"{p}.sha256", "expected 64 lowercase hex digits")
        for k in ("E", "N"):
            if _expect(t, k, int, f"{p}.{k}") <= 0:
                _fail(f"{p}.{k}", "must be positive")
        if "device_name" in t and not _expect(t, "device_name", str, f"{p}.device_name"):
            _fail(f"{p}.device_name", "empty")
    device = _expect(data, "device_name", str, "device_name")
    devices = data.get("device_names", [device])
    if (
        not isinstance(devices, list)
        or not devices
        or not all(isinstance(d, str) and d for d in devices)
    ):
        _fail("device_names", "expected a non-empty list of device names")
    if devices[0] != device:
        _fail("device_names", f"must start with device_name {device!r}")
    golden = _expect(data, "golden", str, "golden")
    if not golden:
        _fail("golden", "empty")
    thr = _expect(data, "thresholds", dict, "thresholds")
    merged = dict(DEFAULT_THRESHOLDS)
    for k, v in thr.items():
        if k not in DEFAULT_THRESHOLDS:
            _fail(f"thresholds.{k}", f"unknown (known: {', '.join(DEFAULT_THRESHOLDS)})")
        v = _expect(thr, k, float, f"thresholds.{k}")
        if not (0 < v < 1):
            _fail(f"thresholds.{k}", "must be in (0, 1)")
        merged[k] = float(v)
    out = dict(data)
    out["thresholds"] = merged
    req = data.get("required_tables", [list(x) for x in DEFAULT_REQUIRED_TABLES])
    if not isinstance(req, list) or not all(
        isinstance(x, list) and len(x) == 2 and all(isinstance(y, int) for y in x) for x in req
    ):
        _fail("required_tables", "expected a list of [E, N] integer pairs")
    out["required_tables"] = [tuple(x) for x in req]
    out["device_names"] = list(devices)
    out["tables"] = [{**t, "device_name": t.get("device_name", device)} for t in tables]
    return out


def load_manifest(path: str | Path) -> dict:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ManifestError(f"manifest {path}: cannot read ({exc.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ManifestError(
            f"manifest {path}: invalid JSON at line {exc.lineno}: {exc.msg}"
        ) from None
    return validate_manifest(data)
