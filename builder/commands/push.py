"""``builder push`` (``make push``): publish the validated image by its content tag, then the aliases."""

from __future__ import annotations

from builder.engine import Engine
from builder.errors import EngineError
from builder.workflow import check_inputs_against_lock, load_target

NAME = "push"
HELP = "push the target's validated image by its content tag, then move the aliases to it"


def register(sub) -> None:
    parser = sub.add_parser(NAME, help=HELP, description=HELP)
    parser.add_argument("--target", help="target name (default: the spec's default_target)")


def run(args, log) -> int:
    from builder.commands.image import existing_image
    from builder.delivery import publish
    from builder.verify import require_verified

    target = load_target(args.spec, args.target)
    with log.step(f"check inputs against {target.lock_file.name}"):
        locked = check_inputs_against_lock(target)
        log.info(f"content tag {locked.tag}")
    engine = Engine.connect()
    # Only `builder image` applies the content tag, and only after validation passed.
    image_id = existing_image(engine, locked)
    if image_id is None:
        raise EngineError(f"push {locked.reference}: no validated image with this lock in the engine; run "
                          f"`python -m builder image --target {target.name}` first")
    with log.step(f"verify {image_id} against the lock"):
        for note in require_verified(engine, image_id, locked.lock, what=locked.reference):
            log.info(note)
    result = publish(engine, target.repository, locked.tag, target.aliases, image_id, log,
                     platform=target.base.platform)
    log.result(f"{locked.reference} {result.manifest_digest}")
    log.result(result.pinned)
    return 0
