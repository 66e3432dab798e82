"""Command line: ``python -m builder <command>``; every failure is one line and exit status 2."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys

from builder.errors import BuilderError, Interrupted
from builder.log import StepLog

COMMANDS = ["lock", "image", "pin", "validate", "push", "resolve", "verify", "matrix"]


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
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        return modules[args.command].run(args, log)
    except Interrupted as exc:
        print(f"error: {exc}; what this run started was removed", file=sys.stderr)
        return 128 + exc.signum
    except BuilderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        for line in exc.details:
            print(f"  {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupted(signum, _frame) -> None:
    """SIGTERM becomes an exception in the main thread, so cleanup runs on this exit path too."""
    signal.signal(signum, signal.SIG_IGN)  # a second signal must not cut the cleanup short
    raise Interrupted(signum, signal.Signals(signum).name)
