"""Regenerate the new-file patches of the stack from their real source files.

A patch that adds one new file (``--- /dev/null``) is generated, not edited: its
source lives under ``patches/src/`` at the path it gets inside the vLLM tree
(``patches/src/vllm/...``), where it can be imported, linted and tested. The
patch keeps its hand-written header (everything before ``--- /dev/null``); the
diff below it is rendered from the source, byte for byte as GNU diff -u writes
a new file.

    python3 patches/regen.py           # rewrite the generated patches (make patches)
    python3 patches/regen.py --check   # exit 1, naming the patch, if one has drifted

Only the standard library is used.
"""

from __future__ import annotations

import sys
from pathlib import Path

PATCHES = Path(__file__).resolve().parent
SRC = PATCHES / "src"
NEW_FILE = "--- /dev/null\n"


class RegenError(Exception):
    """One line naming the patch or source file at fault."""


def new_file_target(patch_text: str) -> str | None:
    """The path (``vllm/...``) a single-new-file patch creates, or None for any other patch."""
    head, sep, body = patch_text.partition(NEW_FILE)
    if not sep:
        return None
    plus = body.split("\n", 1)[0]
    if not plus.startswith("+++ b/"):
        return None
    if "\n--- " in body or "\ndiff " in body:
        return None  # more than one file: hand-written
    return plus[len("+++ b/") :].split("\t", 1)[0]


def render_new_file_diff(rel: str, text: str) -> str:
    """``diff -u /dev/null b/REL`` for a new file with contents ``text``."""
    if not text:
        raise RegenError(f"{rel}: empty source file")
    lines = text.split("\n")
    missing_eol = lines[-1] != ""
    if not missing_eol:
        lines = lines[:-1]
    out = [
        NEW_FILE,
        f"+++ b/{rel}\n",
        f"@@ -0,0 +1,{len(lines)} @@\n" if len(lines) != 1 else "@@ -0,0 +1 @@\n",
    ]
    out += [f"+{line}\n" for line in lines]
    if missing_eol:
        out.append("\\ No newline at end of file\n")
    return "".join(out)


def render_patch(patch: Path, src_root: Path = SRC) -> str | None:
    """The patch's text regenerated from its source, or None if it is not a generated patch."""
    text = patch.read_text()
    rel = new_file_target(text)
    if rel is None:
        return None
    src = src_root / rel
    if not src.is_file():
        raise RegenError(f"{patch.name}: creates {rel} but its source {src} does not exist")
    head = text.partition(NEW_FILE)[0]
    return head + render_new_file_diff(rel, src.read_text())


def generated_patches(patches_dir: Path = PATCHES) -> list[Path]:
    return [
        p for p in sorted(patches_dir.glob("*.patch")) if new_file_target(p.read_text()) is not None
    ]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    check = args == ["--check"]
    if args and not check:
        print("usage: python3 patches/regen.py [--check]", file=sys.stderr)
        return 2
    try:
        drifted = []
        for patch in generated_patches():
            want = render_patch(patch)
            if want is None or want == patch.read_text():
                continue
            drifted.append(patch)
            if not check:
                patch.write_text(want)
                print(f"regenerated {patch.relative_to(PATCHES.parent)}")
    except RegenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if check and drifted:
        names = ", ".join(p.name for p in drifted)
        print(f"error: {names} drifted from patches/src; run `make patches`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
