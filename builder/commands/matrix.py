"""``builder matrix``: how each patch series fares on each vLLM release from PyPI.

The work is done by builder.matrix; this module is the command line.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from builder.errors import BuilderError, PatchError
from builder.matrix import conflict_lines, evaluate_release, render_markdown, to_json
from builder.patchstack import load_series
from builder.pypi import DEFAULT_INDEX, PyPI
from builder.table_names import spec_table_names

NAME = "matrix"
HELP = (
    "compatibility matrix: apply patch series to vLLM releases from PyPI (zero fuzz), "
    "report per patch/file"
)


def register(sub) -> None:
    parser = sub.add_parser(NAME, help=HELP, description=HELP)
    parser.add_argument(
        "versions",
        nargs="+",
        metavar="VERSION",
        help="vLLM release (0.30.0) or inclusive range (0.24.0..0.34.0)",
    )
    parser.add_argument(
        "--series",
        action="append",
        metavar="FILE",
        help="quilt series to run (repeatable; default: patches/series)",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(os.environ.get("M3_CACHE_DIR", "build/cache")),
        help="wheel cache root (default: build/cache; wheels under <dir>/pypi/<sha256>/)",
    )
    parser.add_argument(
        "--index", default=DEFAULT_INDEX, help=f"PyPI base URL (default: {DEFAULT_INDEX})"
    )
    parser.add_argument(
        "--output", type=Path, help="write the Markdown report here (default: stdout)"
    )
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--check", action="store_true", help="any conflict is an error (exit 2)")


def _write(path: Path, text: str) -> None:
    """All or nothing: a temporary file beside ``path``, renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=f".{path.name}.", delete=False
    ) as tmp:
        tmp.write(text)
    os.replace(tmp.name, path)


def run(args, log) -> int:
    series_files = args.series or ["patches/series"]
    stacks = [(name, load_series(Path(name))) for name in series_files]
    try:
        tables = spec_table_names(args.spec)
    except ValueError as exc:
        raise BuilderError(str(exc)) from None
    pypi = PyPI(args.index)
    versions = pypi.expand(args.versions)
    wheels = [pypi.wheel(v) for v in versions]  # every version resolved before any download
    results, fetched, start = [], 0, time.monotonic()
    for release in wheels:
        path, downloaded = pypi.fetch(release, args.cache_dir)
        fetched += downloaded
        log.info(
            f"vllm=={release.version}: {release.filename} ({release.size / 2**20:.0f} MiB, "
            f"{'downloaded, sha256 checked' if downloaded else 'cached'})"
        )
        results.append(
            evaluate_release(release.version, path, release.sha256, release.size, stacks, tables)
        )
    report = render_markdown(results)
    conflicts = conflict_lines(results)
    if args.check and conflicts:
        raise PatchError(
            f"{len(conflicts)} conflict(s); first: {conflicts[0]}", details=conflicts[1:]
        )
    if args.json:
        _write(args.json, json.dumps(to_json(results), indent=1) + "\n")
    if args.output:
        _write(args.output, report)
    else:
        print(report, end="")
    for line in conflicts:
        log.info(f"conflict: {line}")
    log.info(
        f"matrix: {len(results)} release(s), {len(stacks)} series, {fetched} wheel(s) downloaded, "
        f"{time.monotonic() - start:.1f} s"
    )
    return 0
