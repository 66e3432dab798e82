"""Step logging in the manner of cibuildwheel: a header per step, timings, indented detail."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import TextIO


class StepLog:
    def __init__(self, stream: TextIO | None = None, quiet: bool = False):
        self.stream = stream or sys.stderr
        self.quiet = quiet

    def _write(self, text: str) -> None:
        if not self.quiet:
            self.stream.write(text + "\n")
            self.stream.flush()

    @contextlib.contextmanager
    def step(self, title: str) -> Iterator[None]:
        self._write(f"==> {title}")
        started = time.monotonic()
        try:
            yield
        except BaseException:
            self._write(f"    ✗ {title} failed after {time.monotonic() - started:.1f}s")
            raise
        self._write(f"    ✓ {time.monotonic() - started:.1f}s")

    def info(self, text: str) -> None:
        self._write(f"    {text}")

    def progress(self, text: str) -> None:
        """A line of streamed progress (pull/push/build output)."""
        self._write(f"    | {text}")

    def result(self, text: str) -> None:
        """Final output the user came for: always printed to stdout."""
        print(text, flush=True)
