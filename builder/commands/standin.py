"""``builder standin``: build the local stand-in base, push it to the local registry, pin it."""

from __future__ import annotations

from builder.engine import Engine
from builder.errors import SpecError
from builder.spec import UnpinnedTarget, load_spec
from builder.workflow import BUILD_DIR

NAME = "standin"
HELP = "build and push the local stand-in base image, then pin the `standin` target to it"


def register(sub) -> None:
    parser = sub.add_parser(NAME, help=HELP, description=HELP)
    parser.add_argument("--target", default="standin", help="the spec target to pin (default: standin)")
    parser.add_argument("--registry", default="127.0.0.1:5000", help="local registry (default: 127.0.0.1:5000)")


def run(args, log) -> int:
    from builder.standin.build import build_standin_base
    spec = load_spec(args.spec)
    if args.target not in spec.targets:
        raise SpecError(f"{spec.file}: targets: no target {args.target!r}")
    target = spec.targets[args.target]
    pin = target.digest_file if isinstance(target, UnpinnedTarget) else target.base.digest_file
    image = target.image if isinstance(target, UnpinnedTarget) else target.base.image
    # the stand-in base's tag names its vLLM release: standin-base:vllm-0.30.0
    tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
    if not tag.startswith("vllm-"):
        raise SpecError(f"{spec.file}: targets.{args.target}.base.image: {image!r} does not name a stand-in "
                        "release (expected a tag vllm-<version>)")
    version = tag.removeprefix("vllm-")
    engine = Engine.connect()
    with log.step(f"build the stand-in base (debootstrap + torch CPU + vLLM {version} sources)"):
        base = build_standin_base(engine.client, BUILD_DIR / "cache", registry=args.registry, log=log.info,
                                  version=version)
    if pin is None:
        raise SpecError(f"{spec.file}: targets.{args.target}.base: the stand-in target needs a digest_file to pin")
    if not image.startswith(base.repository):
        raise SpecError(f"{spec.file}: targets.{args.target}.base.image: {image!r} is not the stand-in "
                        f"repository {base.repository}")
    pin.parent.mkdir(parents=True, exist_ok=True)
    pin.write_text(base.digest + "\n")
    log.result(f"{pin}: {base.reference}")
    return 0
