"""``builder verify IMAGE`` (``make verify``): check an image against the lock before using it."""

from __future__ import annotations

from pathlib import Path

NAME = "verify"
HELP = (
    "check IMAGE (labels, patched-file fingerprints, tables) against the target's lock; refuse "
    "a mismatch"
)


def register(sub) -> None:
    parser = sub.add_parser(NAME, help=HELP, description=HELP)
    parser.add_argument(
        "image",
        nargs="?",
        help="image reference or id in the engine (default: the registry "
        "copy of the target's content tag, by the manifest digest the lock predicts, pulled if "
        "absent)",
    )
    parser.add_argument(
        "--target", help="target whose lock to check against (default: the spec's default_target)"
    )
    parser.add_argument(
        "--lock", type=Path, help="lock file to check against (default: the target's)"
    )
    parser.add_argument(
        "--rootfs",
        type=Path,
        help="check an unpacked root file system (e.g. an enroot container) instead of IMAGE; "
        "files and lock only, no labels",
    )


def run(args, log) -> int:
    from builder.engine import Engine
    from builder.errors import BuilderError
    from builder.lock import content_tag, read_lock
    from builder.verify import refuse, require_verified, rootfs_problems

    if args.lock is not None:
        lock_file = args.lock
    else:
        from builder.workflow import load_target

        lock_file = load_target(args.spec, args.target).lock_file
    lock = read_lock(lock_file)
    if args.rootfs is not None:
        with log.step(f"verify {args.rootfs} against {lock_file}"):
            problems = rootfs_problems(args.rootfs, lock)
            if problems:
                raise refuse(str(args.rootfs), problems, str(lock_file))
        log.result(
            f"{args.rootfs}: matches {lock_file} (content tag {content_tag(lock)}; files and lock "
            "only)"
        )
        return 0
    engine = Engine.connect()
    if not args.image:
        if args.lock is not None:
            raise BuilderError(
                "verify: give IMAGE (or --rootfs DIR) with --lock; without IMAGE the target's "
                "registry copy is verified"
            )
        args.image, image_id = _predicted(engine, args, log)
    else:
        image_id = engine.inspect(args.image)["Id"]
    with log.step(f"verify {args.image} ({image_id}) against {lock_file}"):
        try:
            notes = require_verified(engine, image_id, lock, what=args.image)
        except BuilderError as exc:
            if exc.details:
                raise refuse(args.image, exc.details, str(lock_file)) from None
            raise
        for note in notes:
            log.info(note)
    log.result(
        f"{args.image}: verified against {lock_file} (content tag {content_tag(lock)}, image "
        f"{image_id})"
    )
    return 0


def _predicted(engine, args, log) -> tuple[str, str]:
    """(pinned reference, engine id) of the registry copy the lock predicts, pulled if absent."""
    from builder.delivery import published_as_predicted
    from builder.errors import EngineError
    from builder.workflow import check_inputs_against_lock, load_target

    locked = check_inputs_against_lock(load_target(args.spec, args.target))
    with log.step(f"look up {locked.reference} (the manifest digest the lock predicts)"):
        remote = published_as_predicted(locked, verb="verify")
        log.info(f"{remote.pinned} (image {remote.config_digest})")

    def find():
        return engine.find_image(
            [remote.config_digest, remote.manifest_digest],
            remote.diff_ids,
            config_digest=remote.config_digest,
        )

    image_id = find()
    if image_id is None:
        with log.step(f"pull {remote.pinned}"):
            engine.pull(remote.pinned, log.progress)
            image_id = find()
            if image_id is None:
                raise EngineError(
                    f"verify {remote.pinned}: pulled, but {engine.describe()} holds no image with "
                    f"config {remote.config_digest}"
                )
    return remote.pinned, image_id
