"""``builder resolve`` (``make resolve``): the digest-pinned references a cluster job runs.

Prints shell assignments (``eval "$(python -m builder resolve ...)"``): the image by digest,
the Pyxis/enroot form, and a cache key derived from the digest, never from a mutable tag.
"""

from __future__ import annotations

from builder.errors import RegistryError
from builder.lock import content_digest

NAME = "resolve"
HELP = "print repo@sha256:..., the Pyxis --container-image form and a digest-derived cache key"


def register(sub) -> None:
    parser = sub.add_parser(NAME, help=HELP, description=HELP)
    parser.add_argument("reference", nargs="?",
                        help="name:tag or name@digest to resolve (default: the target's content tag)")
    parser.add_argument("--target", help="target name (default: the spec's default_target)")


def run(args, log) -> int:
    from builder.delivery import LOCK_LABEL, TAG_LABEL, cache_key, pyxis_image, remote_image
    from builder.workflow import check_inputs_against_lock, load_target

    expected_lock = None
    platform = "linux/amd64"
    if args.reference:
        reference = args.reference
    else:
        target = load_target(args.spec, args.target)
        locked = check_inputs_against_lock(target)
        reference, platform = locked.reference, target.base.platform
        expected_lock = content_digest(locked.lock)
    with log.step(f"resolve {reference}"):
        remote = remote_image(reference, platform, verb="resolve")
        if remote is None:
            raise RegistryError(f"resolve {reference}: no such tag in the registry; push it first (`make push`)")
        if expected_lock is not None and remote.lock_digest != expected_lock:
            raise RegistryError(f"resolve {reference}: the registry's image carries {LOCK_LABEL}="
                                f"{remote.lock_digest or 'nothing'}, not this lock's {expected_lock}; refusing it")
    log.result(f"IMAGE={remote.pinned}")
    log.result(f"PYXIS_IMAGE={pyxis_image(remote.name, remote.manifest_digest)}")
    log.result(f"ENROOT_URI=docker://{pyxis_image(remote.name, remote.manifest_digest)}")
    log.result(f"CACHE_KEY={cache_key(remote.name, remote.manifest_digest)}")
    log.result(f"IMAGE_ID={remote.config_digest}")
    log.result(f"CONTENT_TAG={remote.labels.get(TAG_LABEL, '')}")
    return 0
