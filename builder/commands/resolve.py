"""``builder resolve`` (``make resolve``): the digest-pinned references a cluster job runs.

Prints shell assignments (``eval "$(python -m builder resolve ...)"``): the image by digest,
the Pyxis/enroot form, and a cache key derived from the digest, never from a mutable tag.
"""

from __future__ import annotations

from builder.errors import RegistryError

NAME = "resolve"
HELP = "print repo@sha256:..., the Pyxis --container-image form and a digest-derived cache key"


def register(sub) -> None:
    parser = sub.add_parser(NAME, help=HELP, description=HELP)
    parser.add_argument(
        "reference",
        nargs="?",
        help="name:tag or name@digest to resolve (default: the target's content tag)",
    )
    parser.add_argument("--target", help="target name (default: the spec's default_target)")


def run(args, log) -> int:
    from builder.delivery import (
        TAG_LABEL,
        cache_key,
        published_as_predicted,
        pyxis_image,
        remote_image,
    )
    from builder.workflow import check_inputs_against_lock, load_target

    if args.reference:
        with log.step(f"resolve {args.reference}"):
            remote = remote_image(args.reference, "linux/amd64", verb="resolve")
            if remote is None:
                raise RegistryError(
                    f"resolve {args.reference}: no such tag in the registry; push it first "
                    "(`make push`)"
                )
    else:
        locked = check_inputs_against_lock(load_target(args.spec, args.target))
        with log.step(f"resolve {locked.reference} (the manifest digest the lock predicts)"):
            remote = published_as_predicted(locked, verb="resolve")
    log.result(f"IMAGE={remote.pinned}")
    log.result(f"PYXIS_IMAGE={pyxis_image(remote.name, remote.manifest_digest)}")
    log.result(f"ENROOT_URI=docker://{pyxis_image(remote.name, remote.manifest_digest)}")
    log.result(f"CACHE_KEY={cache_key(remote.name, remote.manifest_digest)}")
    log.result(f"IMAGE_ID={remote.config_digest}")
    log.result(f"MANIFEST_DIGEST={remote.manifest_digest}")
    log.result(f"CONTENT_TAG={remote.labels.get(TAG_LABEL, '')}")
    return 0
