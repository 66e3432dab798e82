"""``builder lock``: resolve the base, apply the stack, fingerprint every input, write the lock."""

from __future__ import annotations

import tempfile
from pathlib import Path

from builder.engine import Engine
from builder.inputs import collect_inputs
from builder.lock import content_tag, lock_diff, read_lock_document, write_lock
from builder.workflow import load_target, resolve_and_patch

NAME = "lock"
HELP = "write the target's lock from the spec, the base and the patch stack"


def register(sub) -> None:
    parser = sub.add_parser(NAME, help=HELP, description=HELP)
    parser.add_argument("--target", help="target name (default: the spec's default_target)")


def run(args, log) -> int:
    target = load_target(args.spec, args.target)
    inputs = collect_inputs(target)
    engine = Engine.connect()
    with tempfile.TemporaryDirectory(prefix="m3-tree-") as tmp:
        _, lock, _ = resolve_and_patch(engine, inputs, log, Path(tmp))
    previous = read_lock_document(target.lock_file) if target.lock_file.exists() else None
    write_lock(target.lock_file, lock)
    if previous is not None:
        for line in lock_diff(previous, lock):
            log.info(line)
    log.result(f"{target.lock_file}: {target.repository}:{content_tag(lock)}")
    return 0
