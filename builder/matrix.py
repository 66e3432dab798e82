"""The compatibility matrix: how each patch series fares on each vLLM release, computed.

For one release: the files the series touch (and the tables' install paths) are read out of
the release's wheel, laid out as ``<work>/vllm/...``, and every series is run over its own
copy with GNU patch at zero fuzz through :mod:`builder.patchstack`. Each patch, and each file
within it, is one of ``applies`` / ``already upstream`` / ``conflict`` (with the hunks that
did not apply); a conflicting patch is left out and the stack goes on, so one conflict does
not hide the state of the patches after it. The pre-image git blob ids are what a target's
``expect`` block needs for that release.
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from builder.hashing import git_blob_id
from builder.patchstack import FailedHunk, Patch, apply_patch, dry_run, file_sections, touched_files

APPLIES, UPSTREAM, CONFLICT = "applies", "already upstream", "conflict"
_RESULT = {"applies": APPLIES, "already-applied": UPSTREAM, "conflict": CONFLICT}
CONFIGS = "vllm/model_executor/layers/fused_moe/configs"


@dataclass(frozen=True)
class FileResult:
    file: str  # vllm/...
    result: str
    hunks: tuple[FailedHunk, ...] = ()


@dataclass(frozen=True)
class PatchResult:
    patch: str
    result: str
    files: tuple[FileResult, ...]


@dataclass(frozen=True)
class SeriesResult:
    series: str  # as given (repo-relative)
    patches: tuple[PatchResult, ...]

    @property
    def clean(self) -> bool:
        return all(p.result != CONFLICT for p in self.patches)


@dataclass(frozen=True)
class ReleaseResult:
    version: str
    wheel: str
    sha256: str
    size: int
    series: tuple[SeriesResult, ...]
    preimages: dict[str, str | None]  # vllm/... -> 40-hex git blob id, None when absent


def read_members(wheel: Path, paths: list[str]) -> dict[str, bytes | None]:
    """The bytes of ``paths`` (vllm/...) in the wheel; None for a path it does not hold."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        return {p: archive.read(p) if p in names else None for p in paths}


def _lay_out(files: dict[str, bytes | None], parent: Path) -> None:
    for rel, data in files.items():
        if data is not None:
            out = parent / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)


def run_series(patches: list[Patch], parent: Path, scratch: Path) -> tuple[PatchResult, ...]:
    """Each patch in order over the tree at ``parent`` (changed in place): per-file dry runs,
    then the whole patch; one that applies is applied, a conflicting one is skipped."""
    results = []
    for patch in patches:
        files = []
        for i, (rel, text) in enumerate(file_sections(patch)):
            part = scratch / f"{patch.name}.{i}.diff"
            part.write_text(text)
            check = dry_run(part, parent)
            files.append(FileResult(rel, _RESULT[check.result], check.failed))
        whole = dry_run(patch.path, parent)
        if whole.result == "applies":
            apply_patch(patch, parent)
        results.append(PatchResult(patch.name, _RESULT[whole.result], tuple(files)))
    return tuple(results)


def evaluate_release(
    version: str,
    wheel: Path,
    sha256: str,
    size: int,
    stacks: list[tuple[str, list[Patch]]],
    tables: list[str],
) -> ReleaseResult:
    """Every series in ``stacks`` ((name, patches)) over the release's own files."""
    touched = list(dict.fromkeys(f for _, patches in stacks for f in touched_files(patches)))
    table_paths = [f"{CONFIGS}/{name}" for name in tables]
    members = read_members(wheel, list(dict.fromkeys(touched + table_paths)))
    series_results = []
    with tempfile.TemporaryDirectory(prefix="m3-matrix-") as tmp:
        for i, (name, patches) in enumerate(stacks):
            parent, scratch = Path(tmp) / f"tree{i}", Path(tmp) / f"scratch{i}"
            scratch.mkdir(parents=True)
            _lay_out({f: members[f] for f in touched_files(patches)}, parent)
            series_results.append(SeriesResult(name, run_series(patches, parent, scratch)))
            shutil.rmtree(parent)
    preimages = {
        p: (git_blob_id(data) if data is not None else None) for p, data in members.items()
    }
    return ReleaseResult(version, wheel.name, sha256, size, tuple(series_results), preimages)


# --------------------------------------------------------------------------- reporting


def conflict_lines(results: list[ReleaseResult]) -> list[str]:
    """One line per conflicting file.

    Form: ``<version>: <series>: <patch>: <file>: hunk #n (line L) ...``.
    """
    lines = []
    for release in results:
        for series in release.series:
            for patch in series.patches:
                if patch.result != CONFLICT:
                    continue
                for f in patch.files:
                    if f.result == CONFLICT:
                        hunks = (
                            ", ".join(f"#{h.hunk} at line {h.line}" for h in f.hunks)
                            or "no hunk placed"
                        )
                        lines.append(
                            f"vllm=={release.version}: {series.series}: {patch.patch}: {f.file}: "
                            f"hunk {hunks} does not apply at zero fuzz"
                        )
    return lines


def _cell(result: str, hunks: tuple[FailedHunk, ...] = ()) -> str:
    if result == CONFLICT and hunks:
        return "**conflict** " + ", ".join(f"#{h.hunk}@{h.line}" for h in hunks)
    return {CONFLICT: "**conflict**", UPSTREAM: "upstream"}.get(result, result)


def render_markdown(results: list[ReleaseResult], title: str = "vLLM compatibility matrix") -> str:
    versions = [r.version for r in results]
    head = "| | " + " | ".join(versions) + " |\n|---|" + "---|" * len(versions) + "\n"
    out = [
        f"# {title}\n",
        "Computed by `python -m builder matrix` (`make matrix`): each release's wheel from PyPI "
        "(sha256 from PyPI's JSON API, checked), the touched files taken out of it, "
        "every series run "
        "with GNU patch at zero fuzz through `builder.patchstack`. `applies`: applies cleanly; "
        "`upstream`: the release already holds the patch's post-image (reverse-applies); "
        "`conflict #n@L`: hunk n does not apply at line L. A conflicting patch is skipped and the "
        "stack goes on. Do not edit by hand; re-run the command.\n",
    ]
    out.append(
        "## Wheels\n\n| version | wheel | MiB | sha256 |\n|---|---|---|---|\n"
        + "".join(
            f"| {r.version} | `{r.wheel}` | {r.size / 2**20:.0f} | `{r.sha256[:16]}…` |\n"
            for r in results
        )
    )
    names = list(dict.fromkeys(s.series for r in results for s in r.series))
    for name in names:
        per = {r.version: next(s for s in r.series if s.series == name) for r in results}
        out.append(f"## `{name}`\n")
        out.append(
            "Whole series: "
            + ", ".join(f"{v} {'clean' if s.clean else '**conflicts**'}" for v, s in per.items())
            + "\n"
        )
        out.append(
            "Per patch:\n\n"
            + head
            + "".join(
                f"| `{p.patch}` | "
                + " | ".join(
                    _cell(next(x for x in per[v].patches if x.patch == p.patch).result)
                    for v in versions
                )
                + " |\n"
                for p in per[versions[0]].patches
            )
        )
        rows = [(p.patch, f.file) for p in per[versions[0]].patches for f in p.files]
        out.append(
            "Per file:\n\n"
            + head
            + "".join(
                f"| `{patch}`: `{file.removeprefix('vllm/')}` | "
                + " | ".join(
                    _cell(fr.result, fr.hunks)
                    for v in versions
                    for pr in per[v].patches
                    if pr.patch == patch
                    for fr in pr.files
                    if fr.file == file
                )
                + " |\n"
                for patch, file in rows
            )
        )
    paths = list(dict.fromkeys(p for r in results for p in r.preimages))
    out.append(
        "## Pre-image blob ids (a target's `expect`)\n\nGit blob ids (first 8 hex) of each "
        "file in the release before patching, `absent` where the release has none.\n\n"
        + head
        + "".join(
            f"| `{p.removeprefix('vllm/model_executor/layers/')}` | "
            + " | ".join((r.preimages.get(p) or "absent")[:8] for r in results)
            + " |\n"
            for p in paths
        )
    )
    lines = conflict_lines(results)
    out.append(
        "## Conflicts\n\n" + ("".join(f"- {line}\n" for line in lines) if lines else "None.\n")
    )
    return "\n".join(out)


def to_json(results: list[ReleaseResult]) -> list[dict]:
    return [
        {
            "version": r.version,
            "wheel": r.wheel,
            "sha256": r.sha256,
            "size": r.size,
            "preimages": r.preimages,
            "series": [
                {
                    "series": s.series,
                    "clean": s.clean,
                    "patches": [
                        {
                            "patch": p.patch,
                            "result": p.result,
                            "files": [
                                {
                                    "file": f.file,
                                    "result": f.result,
                                    "hunks": [{"hunk": h.hunk, "line": h.line} for h in f.hunks],
                                }
                                for f in p.files
                            ],
                        }
                        for p in s.patches
                    ],
                }
                for s in r.series
            ],
        }
        for r in results
    ]
