"""``python -m builder.standin``: build (or reuse) the stand-in base, push it, print its reference."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import docker

from builder.errors import BuilderError
from builder.standin.build import build_standin_base
from builder.standin.vllm_sources import VLLM_VERSION


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m builder.standin", description=__doc__)
    parser.add_argument("--cache-dir", type=Path, default=Path("build/cache"),
                        help="build cache root (default: build/cache)")
    parser.add_argument("--registry", default="127.0.0.1:5000",
                        help="registry to push to (default: 127.0.0.1:5000)")
    parser.add_argument("--quiet", action="store_true", help="print only the reference")
    parser.add_argument("--vllm-version", default=VLLM_VERSION,
                        help=f"the vLLM release whose sources it carries (default: {VLLM_VERSION})")
    args = parser.parse_args(argv)

    def log(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    try:
        base = build_standin_base(docker.from_env(), args.cache_dir, registry=args.registry, log=log,
                                  version=args.vllm_version)
    except BuilderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except docker.errors.DockerException as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"error: Docker engine unreachable ({reason}): start it with scripts/start-dockerd.sh",
              file=sys.stderr)
        return 2
    if base.timings:
        log("standin: timings " + ", ".join(f"{k}={v}" for k, v in base.timings.items()))
    log(f"standin: image {base.local_tag} {base.image_id[:19]} size {base.size / 2**20:.0f} MiB")
    print(base.reference)
    return 0


if __name__ == "__main__":
    sys.exit(main())
