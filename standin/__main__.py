"""``python -m standin`` (``make standin``): build (or reuse) the stand-in bases, push them to the
local registry and pin the spec targets that use them; prints one reference per base.

1. ``m3-image/standin-base:vllm-0.24.0`` (Debian + torch CPU + vLLM 0.24.0) -> target ``standin``;
2. ``m3-image/standin-base:vllm-4a560dd`` (1. + the pinned revision's bytes)
   -> target ``standin-4a560dd``.

With ``--vllm-version 0.30.0`` (or 0.34.0), the stand-in of that release for its ported stack
instead:
``m3-image/standin-base:vllm-<version>``, built on base 1. (reused whole) plus one layer of the
release's extra packages and its own sources -> the target whose base is that tag
(``standin-v0-30``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from builder.engine import Engine
from builder.errors import BuilderError, SpecError
from builder.spec import UnpinnedTarget, load_spec
from standin.build import StandinBase, build_standin_base
from standin.pinned import build_pinned_base
from standin.vllm_sources import VLLM_VERSION, WHEELS


def pin_file(spec_file: Path, name: str, base: StandinBase) -> Path:
    """The target's ``base.digest_file``, once it is sure the target is built on ``base``."""
    spec = load_spec(spec_file)
    if name not in spec.targets:
        raise SpecError(f"{spec.file}: targets: no target {name!r} to pin to {base.reference}")
    target = spec.targets[name]
    pin = target.digest_file if isinstance(target, UnpinnedTarget) else target.base.digest_file
    image = target.image if isinstance(target, UnpinnedTarget) else target.base.image
    if pin is None:
        raise SpecError(
            f"{spec.file}: targets.{name}.base: a stand-in target needs a digest_file to pin"
        )
    if image != f"{base.repository}:{base.local_tag.split(':', 1)[1]}":
        raise SpecError(
            f"{spec.file}: targets.{name}.base.image: {image!r} is not the stand-in base "
            f"{base.repository}:{base.local_tag.split(':', 1)[1]}"
        )
    return pin


def pin_targets(spec_file: Path, pins: dict[str, StandinBase]) -> list[Path]:
    """Write each base's digest into its target's pin file; checks every target before writing
    any."""
    files = {pin_file(spec_file, name, base): base for name, base in pins.items()}
    for path, base in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(base.digest + "\n")
        tmp.replace(path)
    return list(files)


def release_target(spec_file: Path, base: StandinBase) -> str:
    """The one spec target built on the release stand-in ``base``.

    Its base.image is the base's tag.
    """
    spec = load_spec(spec_file)
    image = f"{base.repository}:{base.local_tag.split(':', 1)[1]}"
    names = sorted(
        name
        for name, t in spec.targets.items()
        if (t.image if isinstance(t, UnpinnedTarget) else t.base.image) == image
    )
    if len(names) != 1:
        raise SpecError(
            f"{spec.file}: targets: {len(names) or 'no'} targets are built on {image} "
            f"({', '.join(names) or 'none'}); name the one to pin with --target"
        )
    return names[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m standin",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--spec", type=Path, default=Path("image.yaml"), help="build spec (default: image.yaml)"
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path("build/cache"),
        help="build cache root (default: build/cache)",
    )
    parser.add_argument(
        "--registry", default="127.0.0.1:5000", help="registry to push to (default: 127.0.0.1:5000)"
    )
    parser.add_argument(
        "--vllm-version",
        default=VLLM_VERSION,
        choices=sorted(WHEELS),
        help=f"the vLLM release the stand-in carries (default: {VLLM_VERSION}; "
        "another one builds only that release's stand-in, on the default base)",
    )
    parser.add_argument(
        "--target",
        default=None,
        help="target pinned to the base (default: standin; for another release, the target "
        "whose base.image is its stand-in tag)",
    )
    parser.add_argument(
        "--pinned-target",
        default="standin-4a560dd",
        help="target pinned to the 4a560dd base (default: standin-4a560dd)",
    )
    parser.add_argument(
        "--no-pin", action="store_true", help="build and push only; leave the spec's pins alone"
    )
    parser.add_argument("--quiet", action="store_true", help="print only the references")
    args = parser.parse_args(argv)

    def log(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    try:
        engine = Engine.connect()
        if args.vllm_version != VLLM_VERSION:
            release = build_standin_base(
                engine, args.cache_dir, registry=args.registry, log=log, version=args.vllm_version
            )
            log(
                f"standin: image {release.local_tag} {release.image_id[:19]} "
                f"size {release.size / 2**20:.0f} MiB"
            )
            if not args.no_pin:
                name = args.target or release_target(args.spec, release)
                for path in pin_targets(args.spec, {name: release}):
                    log(f"standin: pinned {path}")
            print(release.reference)
            return 0
        base = build_standin_base(engine, args.cache_dir, registry=args.registry, log=log)
        if base.timings:
            log("standin: timings " + ", ".join(f"{k}={v}" for k, v in base.timings.items()))
        log(
            f"standin: image {base.local_tag} {base.image_id[:19]} size {base.size / 2**20:.0f} MiB"
        )
        pinned = build_pinned_base(engine, base, registry=args.registry, log=log)
        log(f"standin: image {pinned.local_tag} {pinned.image_id[:19]}")
        if not args.no_pin:
            for path in pin_targets(
                args.spec, {args.target or "standin": base, args.pinned_target: pinned}
            ):
                log(f"standin: pinned {path}")
    except BuilderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    print(base.reference)
    print(pinned.reference)
    return 0


if __name__ == "__main__":
    sys.exit(main())
