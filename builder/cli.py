"""Command line: ``python -m builder <command>``; every failure is one line and exit status 2."""

from __future__ import annotations

import argparse
import importlib
import sys

from builder.errors import BuilderError
from builder.log import StepLog

COMMANDS = ["lock", "image", "pin", "validate", "standin", "push", "resolve", "verify", "matrix"]


def _modules():
    found = []
    for name in COMMANDS:
        try:
            found.append(importlib.import_module(f"builder.commands.{name}"))
        except ModuleNotFoundError as exc:
            if exc.name != f"builder.commands.{name}":
                raise
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m builder", description=__doc__)
    parser.add_argument("--spec", default="image.yaml", help="build spec (default: image.yaml)")
    parser.add_argument("--quiet", action="store_true", help="only print results and errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")
    modules = {m.NAME: m for m in _modules()}
    for module in modules.values():
        module.register(sub)
    args = parser.parse_args(argv)
    log = StepLog(quiet=args.quiet)
    try:
        return modules[args.command].run(args, log)
    except BuilderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        for line in exc.details:
            print(f"  {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
