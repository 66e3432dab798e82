"""``builder push`` (``make push``): publish the validated image by its content tag, then the
aliases."""

from __future__ import annotations

from builder.engine import Engine
from builder.errors import EngineError
from builder.workflow import (
    assemble_image,
    check_inputs_against_lock,
    find_built,
    load_target,
    local_image,
)

NAME = "push"
HELP = (
    "push the target's validated image (the builder's own manifest) by its content tag, then "
    "move the aliases"
)


def register(sub) -> None:
    parser = sub.add_parser(NAME, help=HELP, description=HELP)
    parser.add_argument("--target", help="target name (default: the spec's default_target)")


def run(args, log) -> int:
    from builder.delivery import publish
    from builder.verify import require_verified

    target = load_target(args.spec, args.target)
    with log.step(f"check inputs against {target.lock_file.name}"):
        locked = check_inputs_against_lock(target)
        log.info(f"content tag {locked.tag}")
    engine = Engine.connect()
    # Only `builder image` applies the content tag, and only after validation passed.
    image_id = local_image(engine, locked)
    if image_id is None:
        raise EngineError(
            f"push {locked.reference}: no validated image with this lock in the engine; run "
            f"`python -m builder image --target {target.name}` first"
        )
    with log.step(f"verify {image_id} against the lock"):
        for note in require_verified(engine, image_id, locked.lock, what=locked.reference):
            log.info(note)
    # The bytes pushed are the builder's: recomputed from the lock (under a second), and they
    # must be exactly the validated image the engine holds.
    base, image = assemble_image(engine, locked, log)
    if find_built(engine, image) != image_id:
        raise EngineError(
            f"push {locked.reference}: the validated image {image_id} is not the image this lock "
            f"builds (config {image.config_digest}, manifest {image.manifest_digest}); rebuild it "
            f"with `python -m builder image --target {target.name} --rebuild`"
        )
    result = publish(
        target.repository,
        locked.tag,
        target.aliases,
        image,
        base,
        log,
        platform=target.base.platform,
    )
    log.result(f"{locked.reference} {result.manifest_digest}")
    log.result(result.pinned)
    return 0
