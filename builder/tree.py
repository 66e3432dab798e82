"""The touched tree: files read out of the base, pre-images checked, stack applied, tables placed.

Only the files the build touches (those the patch stack names, and the tables' install
paths) leave the image, through the engine's archive API. They are laid out under
``<workdir>/vllm/...`` exactly as ``-p1`` patches expect, checked against the spec's expected
pre-image blob ids, patched, joined by the tables, and fingerprinted again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from builder.engine import Engine
from builder.errors import PatchError
from builder.hashing import Fingerprint
from builder.inputs import Inputs
from builder.patchstack import PATCH_ROOT, Outcome, apply_stack, touched_files


@dataclass(frozen=True)
class PatchedTree:
    parent: Path  # holds vllm/<touched files>
    pre: dict[str, Fingerprint | None]  # rel (under vllm/) -> pre-image, None when absent
    post: dict[str, Fingerprint | None]
    modes: dict[str, int]
    outcomes: tuple[Outcome, ...]


def _under_vllm(rel_from_parent: str) -> str:
    return PurePosixPath(rel_from_parent).relative_to(PATCH_ROOT).as_posix()


def check_expectations(inputs: Inputs, pre: dict[str, Fingerprint | None]) -> None:
    """Every touched file must be declared in the spec's ``expect`` and match it."""
    target = inputs.target
    where = f"{target.spec_file}: targets.{target.name}.expect"
    for rel, found in pre.items():
        if rel not in target.expect:
            raise PatchError(
                f"{where}: the build touches {rel} but the spec declares no expected pre-image for "
                "it"
            )
        expected = target.expect[rel]
        if expected is None:
            if found is not None:
                raise PatchError(
                    f"{where}.{rel}: expected absent, but the base has blob {found.git_blob[:12]}"
                )
        elif found is None:
            raise PatchError(
                f"{where}.{rel}: expected blob {expected}, but the base has no such file"
            )
        elif not found.git_blob.startswith(expected):
            raise PatchError(
                f"{where}.{rel}: expected blob {expected}, the base has {found.git_blob[:12]}"
            )
    for rel in target.expect:
        if rel not in pre:
            raise PatchError(
                f"{where}.{rel}: declared, but neither the stack ({target.series.name}) nor a "
                "table touches it"
            )


def prepare_tree(engine: Engine, base_ref: str, inputs: Inputs, workdir: Path) -> PatchedTree:
    patched = touched_files(list(inputs.patches))
    tables = {f"{PATCH_ROOT}/{t.installs_as}": t for t in inputs.tables}
    clash = sorted(set(patched) & set(tables))
    if clash:
        raise PatchError(
            f"{inputs.target.series}: the stack patches {clash[0]}, which a tuning table replaces"
        )
    files = patched + list(tables)
    root = inputs.target.vllm_root
    in_image = {rel: str(root / _under_vllm(rel)) for rel in files}
    entries = engine.read_files(base_ref, list(in_image.values()))
    pre: dict[str, Fingerprint | None] = {}
    modes: dict[str, int] = {}
    for rel, path in in_image.items():
        entry = entries[path]
        key = _under_vllm(rel)
        if entry is None:
            pre[key] = None
            continue
        pre[key] = Fingerprint.of(entry.data)
        modes[key] = entry.mode
        out = workdir / rel
        if rel in tables:
            continue  # replaced whole: only its pre-image matters
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(entry.data)
    check_expectations(inputs, pre)
    outcomes = apply_stack(list(inputs.patches), workdir)
    for rel, table in tables.items():
        out = workdir / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(table.source.read_bytes())
        modes[_under_vllm(rel)] = 0o644
    post: dict[str, Fingerprint | None] = {}
    for rel in files:
        out = workdir / rel
        post[_under_vllm(rel)] = Fingerprint.of(out.read_bytes()) if out.exists() else None
    return PatchedTree(parent=workdir, pre=pre, post=post, modes=modes, outcomes=tuple(outcomes))
