"""Steps shared by several subcommands: load the target, recompute the lock, build the image."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from builder.assemble import compose_config, image_archive, read_delta
from builder.base import ResolvedBase, ensure_base_in_engine, resolve_base
from builder.context import epoch_of, write_context
from builder.engine import Engine
from builder.errors import EngineError, LockError
from builder.inputs import PROJECT_DIR, Inputs, collect_inputs
from builder.lock import Lock, compute_lock, content_tag, inputs_section, lock_inputs, read_lock, require_match
from builder.log import StepLog
from builder.provenance import image_labels
from builder.spec import Target, load_spec
from builder.tree import PatchedTree, prepare_tree

BUILD_DIR = PROJECT_DIR / "build"


def load_target(spec_file: str, name: str | None) -> Target:
    return load_spec(Path(spec_file)).target(name)


@dataclass(frozen=True)
class Locked:
    """A target whose working-tree inputs match its committed lock."""
    inputs: Inputs
    lock: Lock

    @property
    def tag(self) -> str:
        return content_tag(self.lock)

    @property
    def reference(self) -> str:
        return f"{self.inputs.target.repository}:{self.tag}"


def check_inputs_against_lock(target: Target) -> Locked:
    inputs = collect_inputs(target)
    locked = read_lock(target.lock_file)
    require_match(target.lock_file, inputs_section(locked), lock_inputs(inputs))
    if locked.files is None:
        raise LockError(f"{target.lock_file}: files: missing; re-run `python -m builder lock`")
    return Locked(inputs=inputs, lock=locked)


def resolve_and_patch(engine: Engine, inputs: Inputs, log: StepLog,
                      workdir: Path) -> tuple[ResolvedBase, Lock, PatchedTree]:
    """Resolve the base, make sure the engine has it, patch its files: returns (base, lock, tree)."""
    target = inputs.target
    with log.step(f"resolve base {target.base.reference}"):
        base = resolve_base(target.base)
        log.info(f"platform manifest {base.manifest_digest}, config {base.config_digest}")
        ensure_base_in_engine(engine, base, log)
    with log.step(f"apply patch stack {target.series.name} ({len(inputs.patches)} patches, GNU patch, zero fuzz)"):
        tree = prepare_tree(engine, target.base.reference, inputs, workdir)
        for outcome in tree.outcomes:
            log.info(f"{outcome.result:>15}  {outcome.patch.name}")
    return base, compute_lock(inputs, base, tree), tree


def build_image(engine: Engine, locked: Locked, log: StepLog) -> str:
    """Build the image for a lock-checked target and load it; returns its image id (untagged)."""
    inputs, target = locked.inputs, locked.inputs.target
    with tempfile.TemporaryDirectory(prefix="m3-tree-") as tmp:
        base, current, tree = resolve_and_patch(engine, inputs, log, Path(tmp))
        require_match(target.lock_file, locked.lock, current, what="base or patched files")
        with log.step("render build context"):
            labels = image_labels(locked.lock, target.labels)
            context = write_context(BUILD_DIR / "context" / target.name, inputs, tree, locked.lock, labels,
                                    base_reference=target.base.reference, mtime=epoch_of(base.created))
            log.info(f"context {context.root}")
    with log.step("build delta layer (docker build, classic builder)"):
        delta_ref = f"m3-image-delta/{target.name}:{locked.tag}"
        engine.build(context.root, context.dockerfile, delta_ref, log.progress)
        delta = read_delta(engine.save(delta_ref))
        log.info(f"delta layer {delta.diff_id} ({len(delta.layer)} bytes)")
    with log.step("assemble final config and load it"):
        config = compose_config(base, delta, history_comment=locked.tag)
        archive, image_id = image_archive(config, base, delta)
        engine.load(archive)
        loaded = engine.image_id(image_id)
        if loaded != image_id:
            raise EngineError(f"load: expected image {image_id}, engine has {loaded}")
        log.info(f"image {image_id}")
    return image_id
