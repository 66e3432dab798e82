"""The patch stack: a quilt-style ``series`` of unified diffs applied with GNU patch, zero fuzz.

Each patch, in series order, has exactly one of three outcomes against the tree:

* ``applied``          it applied cleanly (forward dry run succeeded, then applied);
* ``already-applied``  the tree already holds its post-image (reverse dry run succeeds);
* anything else        a conflict: :class:`PatchError` names the file and hunk at fault.

The stack is applied to a private copy of the touched files and copied back only when every
patch succeeded, so a failure leaves the caller's tree exactly as it was.
"""

from __future__ import annotations

import os
import py_compile
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from builder.errors import PatchError
from builder.hashing import sha256_file

PATCH_ROOT = "vllm"  # every path a patch touches lies under vllm/ (-p1 at its parent)
_HEADER_RE = re.compile(r"^(?:---|\+\+\+) (\S+)")
# git's own header names both sides; GNU patch acts on it alone for header-only entries
# (empty new files, mode changes, renames), so its paths are checked and tracked too.
_GIT_HEADER_RE = re.compile(r"^diff --git (\S+) (\S+)$")
_HUNK_RE = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
_HUNK_FAILED_RE = re.compile(r"^Hunk #(\d+) FAILED at (\d+)")
_GIT_EXTENDED = (
    "index ",
    "new file mode",
    "deleted file mode",
    "similarity",
    "rename ",
    "old mode",
    "new mode",
)
_PATCHING_RE = re.compile(r"^(?:checking|patching) file '?([^']+?)'?$")


@dataclass(frozen=True)
class Patch:
    path: Path
    sha256: str
    files: tuple[str, ...]  # paths relative to the parent of vllm/, e.g. vllm/model_executor/...
    upstream: str  # the upstream change it stands in for ("vLLM #45726")
    description: str

    @property
    def name(self) -> str:
        return self.path.name


@dataclass(frozen=True)
class Outcome:
    patch: Patch
    result: str  # "applied" | "already-applied"
    detail: str  # GNU patch's report (offsets are worth seeing)


def load_series(series_file: Path) -> list[Patch]:
    """Parse a quilt ``series`` file and each patch it lists; refuses unsafe or malformed
    patches."""
    series_file = Path(series_file)
    patches = [
        _load_patch((series_file.parent / name).resolve(), f"{series_file}:{lineno}")
        for lineno, name in _series_entries(series_file)
    ]
    if not patches:
        raise PatchError(f"{series_file}: the series lists no patches")
    return patches


def read_series(series_file: Path) -> list[str]:
    """The patch file names a quilt ``series`` lists, in order (checked, not opened)."""
    return [name for _, name in _series_entries(Path(series_file))]


def _series_entries(series_file: Path) -> list[tuple[int, str]]:
    """(line number, patch name) per entry: ``#`` comments and blank lines skipped, ``-p1`` only."""
    try:
        lines = series_file.read_text().splitlines()
    except OSError as exc:
        raise PatchError(f"{series_file}: cannot read series: {exc.strerror}") from None
    entries = []
    seen = set()
    for lineno, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, *opts = line.split()
        if opts not in ([], ["-p1"]):
            raise PatchError(
                f"{series_file}:{lineno}: {name}: only -p1 patches are supported, got "
                f"{' '.join(opts)!r}"
            )
        if "/" in name or name in (".", ".."):
            raise PatchError(
                f"{series_file}:{lineno}: {name!r}: patches must sit beside the series file"
            )
        if name in seen:
            raise PatchError(f"{series_file}:{lineno}: {name} is listed twice")
        seen.add(name)
        entries.append((lineno, name))
    return entries


def _load_patch(path: Path, where: str) -> Patch:
    try:
        text = path.read_text()
    except OSError as exc:
        raise PatchError(f"{where}: {path.name}: cannot read patch: {exc.strerror}") from None
    files: list[str] = []
    header: list[str] = []
    in_header = True
    old_left = new_left = 0  # lines still to come in the current hunk
    for lineno, line in enumerate(text.splitlines(), 1):
        if old_left > 0 or new_left > 0:
            # inside a hunk: "--- x" here is a removed line "-- x", not a file header
            if line.startswith((" ", "-")) or line == "":
                old_left -= 1
            if line.startswith((" ", "+")) or line == "":
                new_left -= 1
            continue
        hunk = _HUNK_RE.match(line)
        if hunk:
            old_left = int(hunk.group(1) or 1)
            new_left = int(hunk.group(2) or 1)
            continue
        if line.startswith(("diff --git", "--- ", "index ")):
            in_header = False
        if in_header:
            header.append(line)
        if re.match(r"^(new|deleted) file mode 120000|^(old|new) mode 120000", line):
            raise PatchError(f"{path}:{lineno}: patches may not create or change symlinks")
        if line.startswith("GIT binary patch") or line.startswith("Binary files "):
            raise PatchError(f"{path}:{lineno}: binary patches are not supported")
        git = _GIT_HEADER_RE.match(line)
        if git:
            files.extend(_checked_path(raw, path, lineno) for raw in git.groups())
            continue
        m = _HEADER_RE.match(line)
        if not m or m.group(1) == "/dev/null":
            continue
        files.append(_checked_path(m.group(1), path, lineno))
    if not files:
        raise PatchError(f"{path}: not a unified diff (no ---/+++ file headers)")
    upstream = next(
        (h.split(":", 1)[1].strip() for h in header if h.lower().startswith("upstream:")), ""
    )
    subject = [h.split(":", 1)[1].strip() for h in header if h.lower().startswith("subject:")]
    description = (
        subject[0] if subject else next((h.strip() for h in header if h.strip()), path.stem)
    )
    return Patch(
        path=path,
        sha256=sha256_file(path),
        files=tuple(dict.fromkeys(files)),
        upstream=upstream,
        description=description,
    )


def file_sections(patch: Patch) -> list[tuple[str, str]]:
    """The patch cut into one self-contained diff per file it touches, in order:
    ``[(path relative to the parent of vllm/, diff text), ...]`` (headers kept, hunks whole)."""
    sections: list[list[str]] = []
    pending: list[str] = []  # git header lines seen before the ---/+++ pair
    old_left = new_left = 0
    for line in patch.path.read_text().splitlines(keepends=True):
        if old_left > 0 or new_left > 0:
            if line.startswith((" ", "-")) or line in ("\n", ""):
                old_left -= 1
            if line.startswith((" ", "+")) or line in ("\n", ""):
                new_left -= 1
            sections[-1].append(line)
            continue
        hunk = _HUNK_RE.match(line)
        if hunk and sections:
            old_left, new_left = int(hunk.group(1) or 1), int(hunk.group(2) or 1)
            sections[-1].append(line)
        elif line.startswith("diff --git "):
            pending = [line]
        elif line.startswith("--- "):
            sections.append(pending + [line])
            pending = []
        elif line.startswith("+++ ") and sections:
            sections[-1].append(line)
        elif pending and line.startswith(_GIT_EXTENDED):
            pending.append(line)
        elif line.startswith("\\") and sections:  # "\ No newline at end of file" after a hunk
            sections[-1].append(line)
        # anything else outside a hunk (the description, a mail signature) belongs to no file
    out = []
    for lines in sections:
        paths = [
            m.group(1) for m in map(_HEADER_RE.match, lines[:4]) if m and m.group(1) != "/dev/null"
        ]
        rel = PurePosixPath(*PurePosixPath(paths[-1]).parts[1:]).as_posix()
        out.append((rel, "".join(lines)))
    return out


def _checked_path(raw: str, patch: Path, lineno: int) -> str:
    """Strip one component (-p1) and make sure the result stays inside vllm/."""
    if raw.startswith("/"):
        raise PatchError(f"{patch}:{lineno}: {raw!r} is an absolute path")
    parts = PurePosixPath(raw).parts
    if ".." in parts:
        raise PatchError(f"{patch}:{lineno}: {raw!r} leaves the vLLM tree ('..')")
    stripped = PurePosixPath(*parts[1:]) if len(parts) > 1 else PurePosixPath("")
    if not stripped.parts or stripped.parts[0] != PATCH_ROOT or len(stripped.parts) < 2:
        raise PatchError(
            f"{patch}:{lineno}: {raw!r} is outside the vLLM tree (expected a/{PATCH_ROOT}/...)"
        )
    return stripped.as_posix()


def touched_files(patches: list[Patch]) -> list[str]:
    """Every path (relative to the parent of vllm/) the stack touches, in first-touch order."""
    return list(dict.fromkeys(f for p in patches for f in p.files))


# --fuzz=0: context must match exactly (line offsets are fine); no backups, no .rej files.
PATCH_FLAGS = ("-p1", "--fuzz=0", "--batch", "--no-backup-if-mismatch", "--reject-file=-")


def run_patch(tree: Path, patch: Path, *args: str) -> subprocess.CompletedProcess:
    """GNU patch with the stack's flags on ``tree`` (the folder holding ``vllm/``); ``args`` add
    ``--forward``, ``--reverse``, ``--dry-run``. Always pass ``--forward`` or ``--reverse``: with
    ``--batch`` alone GNU patch silently reverses a patch it believes applied."""
    cmd = ["patch", *PATCH_FLAGS, "-d", str(tree), "-i", str(patch), *args]
    env = dict(os.environ, LC_ALL="C", POSIXLY_CORRECT="")
    env.pop("POSIXLY_CORRECT")
    try:
        return subprocess.run(cmd, capture_output=True, text=True, env=env)
    except FileNotFoundError:
        raise PatchError("GNU patch is not installed (apt-get install patch)") from None


@dataclass(frozen=True)
class FailedHunk:
    file: str  # as GNU patch names it (vllm/...)
    hunk: int
    line: int


def failed_hunks(output: str) -> list[FailedHunk]:
    """Every ``Hunk #n FAILED at L`` in GNU patch's report, with the file it belongs to."""
    current, found = "?", []
    for line in output.splitlines():
        m = _PATCHING_RE.match(line.strip())
        if m:
            current = m.group(1)
            continue
        m = _HUNK_FAILED_RE.match(line.strip())
        if m:
            found.append(FailedHunk(current, int(m.group(1)), int(m.group(2))))
    return found


def _conflict(patch: Patch, forward: subprocess.CompletedProcess) -> PatchError:
    failed = failed_hunks(forward.stdout)
    if failed:
        first = failed[0]
        return PatchError(
            f"{patch.name}: {first.file}: hunk #{first.hunk} does not apply at line {first.line} "
            "(zero fuzz; neither applicable nor already applied); nothing was changed"
        )
    reason = " ".join((forward.stdout + forward.stderr).split())[:300]
    return PatchError(
        f"{patch.name}: neither applicable nor already applied; nothing was changed ({reason})"
    )


@dataclass(frozen=True)
class DryRun:
    result: str  # "applies" | "already-applied" | "conflict"
    detail: str  # GNU patch's report
    failed: tuple[FailedHunk, ...]  # for a conflict: the hunks the forward run could not place


def dry_run(patch_file: Path, tree: Path) -> DryRun:
    """What ``patch_file`` would do to ``tree`` (parent of vllm/), changing nothing: the forward
    dry run decides "applies", else the reverse one "already-applied", else it is a conflict."""
    forward = run_patch(tree, Path(patch_file), "--forward", "--dry-run")
    if forward.returncode == 0:
        return DryRun("applies", forward.stdout.strip(), ())
    reverse = run_patch(tree, Path(patch_file), "--reverse", "--dry-run")
    if reverse.returncode == 0:
        return DryRun("already-applied", reverse.stdout.strip(), ())
    return DryRun(
        "conflict", (forward.stdout + forward.stderr).strip(), tuple(failed_hunks(forward.stdout))
    )


def apply_patch(patch: Patch, tree: Path) -> Outcome:
    """Apply one patch to ``tree`` at zero fuzz, or raise :class:`PatchError` naming the hunk."""
    check = dry_run(patch.path, tree)
    if check.result == "already-applied":
        return Outcome(patch, "already-applied", check.detail)
    if check.result == "conflict":
        raise _conflict(patch, run_patch(tree, patch.path, "--forward", "--dry-run"))
    done = run_patch(tree, patch.path, "--forward")
    if done.returncode != 0:
        raise _conflict(patch, done)
    return Outcome(patch, "applied", done.stdout.strip())


def apply_stack(patches: list[Patch], parent: Path) -> list[Outcome]:
    """Apply ``patches`` to the tree at ``parent`` (the folder holding ``vllm/``), all or
    nothing."""
    parent = Path(parent)
    files = touched_files(patches)
    for rel in files:
        target = parent / rel
        for probe in [target, *target.parents]:
            if probe == parent:
                break
            if probe.is_symlink():
                raise PatchError(f"{probe}: is a symlink; the patch stack never follows links")
    with tempfile.TemporaryDirectory(prefix="m3-patch-") as tmp:
        work = Path(tmp)
        for rel in files:
            if (parent / rel).exists():
                (work / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(parent / rel, work / rel)
        outcomes = [apply_patch(patch, work) for patch in patches]
        _compile_all(work, files)
        # Every patch went through: copy the results back (and drop files the stack deleted).
        for rel in files:
            src, dst = work / rel, parent / rel
            if src.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                tmp_dst = dst.with_name(f".{dst.name}.m3-new")
                shutil.copy2(src, tmp_dst)
                os.replace(tmp_dst, dst)
            elif dst.exists():
                dst.unlink()
    return outcomes


def _compile_all(work: Path, files: list[str]) -> None:
    """py_compile every patched Python file (bytecode goes to a scratch file, never the tree)."""
    with tempfile.TemporaryDirectory(prefix="m3-pyc-") as scratch:
        for rel in files:
            path = work / rel
            if path.suffix == ".py" and path.exists():
                try:
                    py_compile.compile(
                        str(path), cfile=os.path.join(scratch, "x.pyc"), doraise=True
                    )
                except py_compile.PyCompileError as exc:
                    raise PatchError(
                        f"{rel}: does not compile after patching: "
                        f"{exc.msg.strip().splitlines()[-1]}"
                    ) from None
