"""``builder pin``: resolve a target's mutable base tag to a digest and write its pin file."""

from __future__ import annotations

from builder.errors import SpecError
from builder.registry import client_for
from builder.spec import DIGEST_RE, UnpinnedTarget, load_spec

NAME = "pin"
HELP = "resolve the base tag of a target to a digest (writes base.digest_file)"


def register(sub) -> None:
    parser = sub.add_parser(NAME, help=HELP, description=HELP)
    parser.add_argument("target")
    parser.add_argument("--digest", help="pin to this digest instead of asking the registry")


def run(args, log) -> int:
    spec = load_spec(args.spec)
    if args.target not in spec.targets:
        raise SpecError(f"{spec.file}: targets: no target {args.target!r}")
    target = spec.targets[args.target]
    if not isinstance(target, UnpinnedTarget):
        raise SpecError(
            f"{spec.file}: targets.{args.target}.base: already pinned to {target.base.digest}; "
            "delete its digest file to re-pin"
        )
    digest = args.digest
    if digest is None:
        client, ref = client_for(target.image)
        manifest = client.get_manifest(ref.repository, ref.tag or "latest")
        if manifest is None:
            raise SpecError(
                f"{spec.file}: targets.{args.target}.base.image: {target.image!r} does not exist"
            )
        digest = manifest.digest
    if not DIGEST_RE.match(digest):
        raise SpecError(f"--digest: {digest!r} is not a sha256 digest")
    target.digest_file.parent.mkdir(parents=True, exist_ok=True)
    target.digest_file.write_text(digest + "\n")
    log.result(f"{target.digest_file}: {target.image}@{digest}")
    return 0
