"""``builder image`` (``make image``): build, validate, then tag the target's image."""

from __future__ import annotations

from builder.engine import Engine
from builder.errors import ValidationFailed
from builder.workflow import (
    BUILD_DIR,
    Locked,
    assemble_image,
    check_inputs_against_lock,
    find_built,
    load_image,
    load_target,
    local_image,
    release,
    removed_unless_released,
)

NAME = "image"
HELP = "build the target's image from its lock, validate it, and tag it"


def register(sub) -> None:
    parser = sub.add_parser(NAME, help=HELP, description=HELP)
    parser.add_argument("--target", help="target name (default: the spec's default_target)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    parser.add_argument(
        "--rebuild", action="store_true", help="build even if the content tag already exists"
    )
    parser.add_argument(
        "--skip-validation",
        action="store_true",
        help="build and load only: the image gets no tag (for reproducibility checks)",
    )


def print_plan(locked: Locked, log) -> None:
    target, lock = locked.inputs.target, locked.lock
    log.result(f"target      {target.name}: {target.description}")
    log.result(f"base        {target.base.image} @ {target.base.digest}")
    log.result(f"            platform manifest {lock.base.manifest}, config {lock.base.config}")
    log.result(f"vllm        {lock.vllm.version} at {lock.vllm.root}")
    for patch in lock.inputs.patches:
        log.result(
            f"patch       {patch.file}  sha256:{patch.sha256[:12]}  ({patch.upstream or 'local'})"
        )
    for table in lock.inputs.tables:
        log.result(f"table       {table.file} -> vllm/{table.installs_as}")
    for rel, change in (lock.files or {}).items():
        pre = change.pre.git_blob[:10] if change.pre else "absent"
        post = change.post.git_blob[:10] if change.post else "absent"
        log.result(f"file        {rel}: {pre} -> {post}")
    log.result(f"image       {locked.reference}  (+ {', '.join(target.aliases) or 'no aliases'})")
    log.result(
        "steps       check lock -> pull base -> patch -> write delta layer -> assemble config + "
        "manifest -> load -> validate -> tag"
    )


def run(args, log) -> int:
    target = load_target(args.spec, args.target)
    with log.step(f"check inputs against {target.lock_file.name}"):
        locked = check_inputs_against_lock(target)
        log.info(f"content tag {locked.tag}")
    if args.dry_run:
        print_plan(locked, log)
        return 0
    engine = Engine.connect()
    image_id = None if args.rebuild else local_image(engine, locked)
    if image_id is not None:
        log.result(f"{locked.reference} is up to date")
        log.result(f"{locked.reference} {image_id}")
        return 0
    from builder import delivery

    if not args.rebuild and not args.skip_validation:  # never rebuild what the registry holds
        image_id = delivery.pull_if_published(engine, locked, log)
        if image_id is not None:
            log.result(f"{locked.reference} {image_id} (pulled, not built)")
            return 0
    _, image = assemble_image(engine, locked, log)
    preexisting = find_built(engine, image) is not None
    image_id = load_image(engine, image, log)
    with removed_unless_released(engine, image_id, preexisting, log):
        if args.rebuild:  # reproducibility check against the registry
            delivery.check_reproduces(locked, image, log)
        if args.skip_validation:
            log.result(f"{image_id} (not validated, not tagged)")
            return 0
        from builder.validate import run_validation

        report_dir = BUILD_DIR / "reports" / target.name / locked.tag
        with log.step("validate: smoke suite inside the image"):
            result = run_validation(engine, image_id, report_dir, log=log.info)
        if not result.passed:
            raise ValidationFailed(
                f"{image_id}: validation failed ({', '.join(result.failed_checks)}); "
                f"no tag applied; report in {report_dir}"
            )
        with log.step("tag"):
            release(engine, locked, image_id, log)
    log.info(f"manifest {image.manifest_digest}, config {image.config_digest}")
    log.result(f"{locked.reference} {image_id}")
    return 0
