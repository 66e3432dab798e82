"""The lock: every input of a build, fingerprinted, in a committed human-readable file.

``builder lock`` writes it; ``make image`` recomputes the same document from the working
tree and the base and refuses to build when the two differ, printing what changed. The
content tag is a hash of the lock, so it names all inputs and nothing else (no clock).
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import yaml

import builder
from builder.base import ResolvedBase
from builder.errors import LockError
from builder.hashing import sha256_bytes
from builder.inputs import Inputs
from builder.tree import PatchedTree

LOCK_SCHEMA = 1
HEADER = ("# Written by `python -m builder lock`; do not edit by hand.\n"
          "# `make image` refuses to build when any input drifts from this file.\n")


def _fp(fp) -> dict | str:
    return fp.as_dict() if fp is not None else "absent"


def lock_inputs(inputs: Inputs) -> dict:
    """The lock's engine-free part: what the working tree and the spec say."""
    target = inputs.target
    return {
        "schema": LOCK_SCHEMA,
        "target": target.name,
        "base": {"image": target.base.image, "digest": target.base.digest, "platform": target.base.platform},
        "vllm": {"root": str(target.vllm_root), "version": target.vllm_version, "revision": target.vllm_revision},
        "builder": {"version": builder.__version__, "sha256": inputs.builder_sha256},
        "inputs": {
            "series": {"file": inputs.rel(target.series), "sha256": inputs.series_sha256},
            "patches": [{"file": inputs.rel(p.path), "sha256": p.sha256, "upstream": p.upstream}
                        for p in inputs.patches],
            "tables": [{"file": inputs.rel(t.source), "sha256": t.sha256, "installs_as": t.installs_as}
                       for t in inputs.tables],
            "template": {"file": "dockerfiles/delta.Dockerfile.j2", "sha256": inputs.template_sha256},
            "smoke": {"sha256": inputs.smoke_sha256},
            "output": {"repository": target.repository, "aliases": list(target.aliases)},
            "labels": dict(sorted(target.labels.items())),
            "env": dict(sorted(target.env.items())),
        },
    }


def compute_lock(inputs: Inputs, base: ResolvedBase, tree: PatchedTree) -> dict:
    lock = lock_inputs(inputs)
    lock["base"].update({"manifest": base.manifest_digest, "config": base.config_digest, "created": base.created})
    lock["files"] = {rel: {"pre": _fp(tree.pre[rel]), "post": _fp(tree.post[rel])} for rel in sorted(tree.pre)}
    return lock


def content_digest(lock: dict) -> str:
    canonical = json.dumps(lock, sort_keys=True, separators=(",", ":")).encode()
    return sha256_bytes(canonical)


def content_tag(lock: dict) -> str:
    """The image tag: ``<vllm version>-m3-<16 hex of the lock digest>``, all inputs, no timestamp."""
    version = lock["vllm"]["version"].split("+")[0].replace("/", "-")
    return f"{version}-m3-{content_digest(lock)[:16]}"


def write_lock(path: Path, lock: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(HEADER + yaml.safe_dump(lock, sort_keys=False, width=200))
    tmp.replace(path)


def read_lock(path: Path) -> dict:
    try:
        doc = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise LockError(f"{path}: no lock; run `python -m builder lock --target <name>` first") from None
    except OSError as exc:
        raise LockError(f"{path}: cannot read the lock: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise LockError(f"{path}: not valid YAML (not UTF-8 text)") from None
    except yaml.YAMLError as exc:
        raise LockError(f"{path}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(doc, dict) or doc.get("schema") != LOCK_SCHEMA:
        raise LockError(f"{path}: schema: expected {LOCK_SCHEMA}, got {doc.get('schema') if isinstance(doc, dict) else doc!r}")
    return doc


def _flatten(doc, prefix: str = "", typed: bool = False) -> list[str]:
    if isinstance(doc, dict) and doc:
        # Key order is layout, not content (the content tag sorts keys too): compare sorted.
        return [line for k, v in sorted(doc.items(), key=lambda kv: str(kv[0]))
                for line in _flatten(v, f"{prefix}.{k}" if prefix else str(k), typed)]
    if isinstance(doc, list) and doc:
        return [line for i, v in enumerate(doc) for line in _flatten(v, f"{prefix}[{i}]", typed)]
    # Empty containers show as {} / []; `typed` tells 1 from "1" and None from "None".
    return [f"{prefix}: {json.dumps(doc, sort_keys=True) if typed or doc in ({}, []) else doc}"]


def lock_diff(locked: dict, current: dict) -> list[str]:
    """The lines that differ, as a unified diff of ``key.path: value`` lines.

    Values that print alike but differ in type (1 and "1") are shown JSON-typed, so a
    difference the content tag sees is never an empty diff.
    """
    lines = _flatten(locked), _flatten(current)
    if lines[0] == lines[1] and locked != current:
        lines = _flatten(locked, typed=True), _flatten(current, typed=True)
    return [line for line in difflib.unified_diff(*lines, "lock", "working tree", lineterm="", n=0)
            if not line.startswith("@@")]


def inputs_section(lock: dict) -> dict:
    """The part of a full lock that :func:`lock_inputs` recomputes without an engine."""
    section = {k: lock.get(k) for k in ("schema", "target", "vllm", "builder", "inputs")}
    section["base"] = {k: lock.get("base", {}).get(k) for k in ("image", "digest", "platform")}
    return {k: section[k] for k in ("schema", "target", "base", "vllm", "builder", "inputs")}


def require_match(path: Path, locked: dict, current: dict, what: str = "inputs") -> None:
    diff = lock_diff(locked, current)
    if diff:
        raise LockError(f"{path}: {what} drifted from the lock ({len({l[1:].split(': ', 1)[0] for l in diff[2:]})} "
                        f"changed); review the diff below and run `python -m builder lock` to accept it",
                        details=diff)
