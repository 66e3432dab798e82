"""Steps shared by several subcommands: load the target, recompute the lock, build the image."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from builder.assemble import BuiltImage, Delta, assemble, load_archive
from builder.base import ResolvedBase, ensure_base_in_engine, resolve_base
from builder.context import epoch_of, write_context
from builder.engine import Engine
from builder.errors import EngineError, LockError
from builder.hashing import sha256_bytes
from builder.inputs import PROJECT_DIR, Inputs, collect_inputs
from builder.layer import canonical_layer
from builder.lock import (
    Lock,
    compute_lock,
    content_digest,
    content_tag,
    inputs_section,
    lock_inputs,
    read_lock,
    require_match,
)
from builder.log import StepLog
from builder.provenance import NS, image_labels
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


def resolve_and_patch(
    engine: Engine, inputs: Inputs, log: StepLog, workdir: Path
) -> tuple[ResolvedBase, Lock, PatchedTree]:
    """Resolve the base, make sure the engine has it, patch its files: returns (base, lock,
    tree)."""
    target = inputs.target
    with log.step(f"resolve base {target.base.reference}"):
        base = resolve_base(target.base)
        log.info(f"platform manifest {base.manifest_digest}, config {base.config_digest}")
        handle = ensure_base_in_engine(engine, base, log)
    with log.step(
        f"apply patch stack {target.series.name} ({len(inputs.patches)} patches, GNU patch, zero "
        "fuzz)"
    ):
        tree = prepare_tree(engine, handle, inputs, workdir)
        for outcome in tree.outcomes:
            log.info(f"{outcome.result:>15}  {outcome.patch.name}")
    return base, compute_lock(inputs, base, tree), tree


def delta_of(locked: Locked, base: ResolvedBase, tree: PatchedTree, log: StepLog) -> Delta:
    """Render the context (delta tree + the Dockerfile documenting it) and write the canonical
    layer."""
    target = locked.inputs.target
    with log.step("render build context"):
        labels = image_labels(locked.lock, target.labels)
        mtime = epoch_of(base.created)
        context = write_context(
            BUILD_DIR / "context" / target.name,
            locked.inputs,
            tree,
            locked.lock,
            labels,
            base_reference=target.base.reference,
            mtime=mtime,
        )
        log.info(f"context {context.root}")
    with log.step("build delta layer (canonical tar written by the builder, no engine)"):
        layer = canonical_layer(context.delta, mtime)
        delta = Delta(
            layer=layer,
            diff_id="sha256:" + sha256_bytes(layer),
            labels=labels,
            env=[f"{key}={value}" for key, value in sorted(target.env.items())],
        )
        log.info(f"delta layer {delta.diff_id} ({len(layer)} bytes)")
    return delta


def assemble_image(engine: Engine, locked: Locked, log: StepLog) -> tuple[ResolvedBase, BuiltImage]:
    """Everything the image is, computed from the lock and the base: config, manifest, delta layer.

    The engine only supplies the base's files (archive API); nothing here depends on its version.
    """
    inputs, target = locked.inputs, locked.inputs.target
    with tempfile.TemporaryDirectory(prefix="m3-tree-") as tmp:
        base, current, tree = resolve_and_patch(engine, inputs, log, Path(tmp))
        require_match(target.lock_file, locked.lock, current, what="base or patched files")
        delta = delta_of(locked, base, tree, log)
    image = assemble(base, delta, history_comment=locked.tag)
    write_outputs(BUILD_DIR / "context" / target.name / "image", image)
    log.info(f"config {image.config_digest}, manifest {image.manifest_digest}")
    return base, image


def write_outputs(folder: Path, image: BuiltImage) -> None:
    """The image's own files, for people and tools to inspect: config, manifest, delta layer."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in (
        ("config.json", image.config),
        ("manifest.json", image.manifest),
        ("delta.tar", image.delta.layer),
    ):
        (folder / name).write_bytes(data)


def find_built(engine: Engine, image: BuiltImage) -> str | None:
    """The engine's id for ``image`` (config digest on classic stores and Podman, manifest digest
    on the containerd store), or None."""
    return engine.find_image(
        [image.config_digest, image.manifest_digest],
        image.diff_ids,
        config_digest=image.config_digest,
    )


def load_image(engine: Engine, image: BuiltImage, log: StepLog) -> str:
    """Load ``image`` (config + delta layer; the base stays where it is); returns the engine's
    id."""
    with log.step("load config + delta layer into the engine"):
        engine.load(load_archive(image))
        handle = find_built(engine, image)
        if handle is None:
            raise EngineError(
                f"load: {engine.describe()} reports success but holds no image with config "
                f"{image.config_digest} / manifest {image.manifest_digest}"
            )
        log.info(f"image {handle}")
    return handle


def build_image(engine: Engine, locked: Locked, log: StepLog) -> tuple[BuiltImage, str]:
    """Build the image for a lock-checked target and load it: (the image, the engine's id,
    untagged)."""
    _, image = assemble_image(engine, locked, log)
    return image, load_image(engine, image, log)


# -- images in the engine: ours, validated, tagged ---------------------------------------------
def local_image(engine: Engine, locked: Locked) -> str | None:
    """The local image tagged with the content tag, if it carries this very lock (the only images
    that carry the content tag are validated ones: `builder image` tags after validation)."""
    image_id = engine.image_id(locked.reference)
    if image_id is None:
        return None
    labels = engine.inspect(image_id)["Config"].get("Labels") or {}
    return image_id if labels.get(f"{NS}.lock.sha256") == content_digest(locked.lock) else None


def release(engine: Engine, locked: Locked, image_id: str, log: StepLog) -> None:
    """Apply the content tag, then the aliases."""
    target = locked.inputs.target
    for tag in (locked.tag, *target.aliases):
        engine.tag(image_id, target.repository, tag)
        log.info(f"tagged {target.repository}:{tag}")


@contextmanager
def removed_unless_released(
    engine: Engine, image_id: str, preexisting: bool, log: StepLog
) -> Iterator[None]:
    """Remove the image this run loaded if anything (failed validation, an engine error, SIGTERM,
    Ctrl-C) ends the block early: no dangling image is left behind. An image that was in the
    engine before this run is left alone."""
    try:
        yield
    except BaseException:
        if not preexisting:
            engine.remove(image_id)
            log.info(f"removed {image_id} (loaded by this run, not released)")
        raise
