"""Static checks: patched-file fingerprints and the tuned MoE tables."""

from __future__ import annotations

import json
import os
from pathlib import Path

from m3_smoke.fingerprint import git_blob_id, sha256_bytes
from m3_smoke.report import CheckFailed

CONFIGS_REL = "model_executor/layers/fused_moe/configs"
BLOCK_SHAPE = [128, 128]
DTYPE = "fp8_w8a8"
TILE_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M")


def check_fingerprints(manifest: dict) -> dict:
    root = Path(manifest["vllm_root"])
    bad, ok = [], []
    for rel, fp in sorted(manifest["patched_files"].items()):
        path = root / rel
        try:
            data = path.read_bytes()
        except OSError:
            bad.append(f"{rel} missing")
            continue
        got_sha, got_blob = sha256_bytes(data), git_blob_id(data)
        if got_sha != fp["sha256"]:
            bad.append(f"{rel} sha256 {got_sha[:12]} != {fp['sha256'][:12]}")
        elif got_blob != fp["git_blob"]:
            bad.append(f"{rel} git blob {got_blob[:10]} != {fp['git_blob'][:10]}")
        else:
            ok.append(rel)
    if bad:
        raise CheckFailed(
            f"{len(bad)} of {len(manifest['patched_files'])} patched files differ: "
            + "; ".join(bad),
            mismatched=bad,
            matched=ok,
        )
    return {"files": len(ok)}


def expected_table_name(E: int, N: int, device_name: str) -> str:
    """The file name vLLM's own ``get_config_file_name`` builds for (E, N)."""
    from vllm.model_executor.layers.fused_moe.fused_moe import get_config_file_name

    from m3_smoke.vllm_env import mocked_device_name

    with mocked_device_name(device_name):
        return get_config_file_name(E, N, DTYPE, BLOCK_SHAPE)


def _parse_table(path: Path) -> dict[int, dict]:
    raw = json.loads(path.read_text())
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    raw.pop("triton_version", None)
    out = {}
    for k, v in raw.items():
        m = int(k)
        if not isinstance(v, dict) or any(t not in v for t in TILE_KEYS):
            raise ValueError(f"key {k}: missing one of {', '.join(TILE_KEYS)}")
        out[m] = v
    if not out:
        raise ValueError("no batch-size keys")
    return out


def _label(device: str, primary: str, E: int, N: int) -> str:
    """Report key of one table: ``E=..,N=..`` for the target's device, ``<device>:E=..,N=..``
    for a copy installed for another device of the family (e.g. MI325X)."""
    return f"E={E},N={N}" if device == primary else f"{device}:E={E},N={N}"


def _devices(manifest: dict) -> list[str]:
    return list(manifest.get("device_names") or [manifest["device_name"]])


def check_tables_installed(manifest: dict) -> dict:
    root = Path(manifest["vllm_root"])
    cfg_dir = root / CONFIGS_REL
    dev = manifest["device_name"]
    problems, seen = [], {}
    for t in manifest["tables"]:
        name, E, N = t["file"], t["E"], t["N"]
        tdev = t.get("device_name", dev)
        want = expected_table_name(E, N, tdev)
        if name != want:
            on = "" if tdev == dev else f" on {tdev}"
            problems.append(f"{name!r}: vLLM looks up {want!r} for E={E},N={N}{on}")
            continue
        path = cfg_dir / name
        if not path.is_file():
            problems.append(f"{name} not installed in {CONFIGS_REL}/")
            continue
        data = path.read_bytes()
        if sha256_bytes(data) != t["sha256"]:
            problems.append(
                f"{name} sha256 {sha256_bytes(data)[:12]} != manifest {t['sha256'][:12]}"
            )
            continue
        try:
            keys = sorted(_parse_table(path))
        except ValueError as exc:
            problems.append(f"{name} does not parse: {exc}")
            continue
        seen[(tdev, E, N)] = {"file": name, "batch_sizes": keys}
    for tdev in _devices(manifest):
        for E, N in manifest["required_tables"]:
            if (tdev, E, N) not in seen:
                want = expected_table_name(E, N, tdev)
                present = (cfg_dir / want).is_file()
                on = "" if tdev == dev else f" for {tdev}"
                problems.append(
                    f"required table E={E},N={N}{on} not verified ({want} "
                    f"{'present but not in manifest/failed' if present else 'not installed'})"
                )
    if problems:
        raise CheckFailed("; ".join(problems), problems=problems)
    return {
        _label(d, dev, E, N): v
        for (d, E, N), v in sorted(
            seen.items(),
            key=lambda kv: (
                _devices(manifest).index(kv[0][0]) if kv[0][0] in _devices(manifest) else 99,
                kv[0],
            ),
        )
    }


def check_tables_lookup(manifest: dict, *, hidden: int = 6144, top_k: int = 4) -> dict:
    """vLLM's own lookup, with the device mocked as each device the manifest names (the
    target's, e.g. AMD_Instinct_MI300X, and the family copies', e.g. AMD_Instinct_MI325X),
    returns the installed tables."""
    import vllm.envs as envs
    from vllm.model_executor.layers.fused_moe import fused_moe as fm

    from m3_smoke.vllm_env import captured_vllm_log, mocked_device_name

    root = Path(manifest["vllm_root"])
    cfg_dir = root / CONFIGS_REL
    dev = manifest["device_name"]
    user_folder = envs.VLLM_TUNED_CONFIG_FOLDER
    problems, details = [], {"vllm_tuned_config_folder": user_folder}
    by_shape = {(t.get("device_name", dev), t["E"], t["N"]): t for t in manifest["tables"]}
    wanted = []
    for tdev in _devices(manifest):
        for E, N in manifest["required_tables"]:
            wanted.append((tdev, E, N))
    for key in by_shape:
        if key not in wanted:
            wanted.append(key)
    for tdev, E, N in wanted:
        t = by_shape.get((tdev, E, N))
        label = _label(tdev, dev, E, N)
        if t is None:
            problems.append(f"{label}: no table in manifest")
            continue
        src = cfg_dir / t["file"]
        try:
            expected = _parse_table(src)
        except (OSError, ValueError) as exc:
            problems.append(f"{label}: manifest table {t['file']} unreadable ({exc})")
            continue
        w1_shape, w2_shape = (E, 2 * N, hidden), (E, hidden, N)
        fm.get_moe_configs.cache_clear()
        with mocked_device_name(tdev), captured_vllm_log() as log:
            got, default_hits = {}, 0
            for m in sorted(expected):
                cfg = fm.try_get_optimal_moe_config(
                    w1_shape, w2_shape, top_k, DTYPE, m, block_shape=BLOCK_SHAPE
                )
                default = fm.get_default_config(m, E, N, hidden, top_k, DTYPE, BLOCK_SHAPE)
                got[m] = dict(cfg)
                if dict(cfg) == dict(default) and dict(cfg) != expected[m]:
                    default_hits += 1
        fm.get_moe_configs.cache_clear()
        mism = [m for m in sorted(expected) if got[m] != expected[m]]
        used = [ln for ln in log if ln.startswith("Using configuration from")]
        used_path = used[-1].split("from ", 1)[1].split(" for MoE")[0] if used else None
        details[label] = {
            "batch_sizes": len(expected),
            "loaded_from": used_path,
            "device_name": tdev,
        }
        if mism:
            fallback = any("Using default MoE config" in ln for ln in log)
            problems.append(
                f"{label}: vLLM returned "
                f"{'the default config' if fallback or default_hits else 'a different config'}"
                f" for M={','.join(map(str, mism[:6]))}{'...' if len(mism) > 6 else ''}"
                f" instead of {t['file']}"
            )
            continue
        if used_path is None or (
            os.path.realpath(used_path) != os.path.realpath(src)
            and not (user_folder and Path(used_path).read_bytes() == src.read_bytes())
        ):
            problems.append(f"{label}: vLLM loaded {used_path}, not {src}")
    if problems:
        raise CheckFailed("; ".join(problems), **details)
    return details
