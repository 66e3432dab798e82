"""builder.patchstack: series parsing, path safety, and apply_stack's three outcomes with real GNU
patch."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from m3_builder_testlib import A_PY, B_PY, REPO, assert_one_line, copy_files, snapshot, udiff

from builder.errors import PatchError
from builder.patchstack import apply_stack, load_series, touched_files

A_POST = A_PY.replace("return 1", "return 10")
B_POST = B_PY.replace("Z = 3", "Z = 30")
P_A = udiff(A_PY, A_POST, "vllm/a.py")
P_B = udiff(B_PY, B_POST, "vllm/sub/b.py")
G_POST = A_PY.replace("return 2", "return 20")
P_G = udiff(A_PY, G_POST, "vllm/a.py")  # a hunk mid-file: three context lines on each side


def test_gnu_patch_is_real():
    assert shutil.which("patch") == "/usr/bin/patch"
    assert (
        "GNU patch" in subprocess.run(["patch", "--version"], capture_output=True, text=True).stdout
    )


# --------------------------------------------------------------------------- series parsing


def test_series_parsing_comments_blank_lines_and_p1(write_series):
    series = write_series(
        {"0001-a.patch": "Subject: change a\nUpstream: vLLM #1\n\n" + P_A, "0002-b.patch": P_B},
        lines=["# the stack", "", "0001-a.patch -p1   # trailing comment", "   ", "0002-b.patch"],
    )
    patches = load_series(series)
    assert [p.name for p in patches] == ["0001-a.patch", "0002-b.patch"]
    first = patches[0]
    assert first.path == (series.parent / "0001-a.patch").resolve()
    assert first.sha256 == hashlib.sha256((series.parent / "0001-a.patch").read_bytes()).hexdigest()
    assert first.files == ("vllm/a.py",)
    assert first.upstream == "vLLM #1"
    assert first.description == "change a"
    assert patches[1].files == ("vllm/sub/b.py",)
    assert patches[1].upstream == ""
    assert touched_files(patches) == ["vllm/a.py", "vllm/sub/b.py"]


@pytest.mark.parametrize(
    "lines, needles",
    [
        (
            ["0001-a.patch -p0"],
            ["series:1", "0001-a.patch", "only -p1 patches are supported", "'-p0'"],
        ),
        (["0001-a.patch -p1 -R"], ["series:1", "'-p1 -R'"]),
        (["0001-a.patch", "# c", "0001-a.patch"], ["series:3", "0001-a.patch is listed twice"]),
        (
            ["sub/0001-a.patch"],
            ["series:1", "'sub/0001-a.patch'", "must sit beside the series file"],
        ),
        (["../0001-a.patch"], ["series:1", "'../0001-a.patch'"]),
        (["# only comments", ""], ["the series lists no patches"]),
        (["0009-missing.patch"], ["series:1", "0009-missing.patch", "cannot read patch"]),
    ],
    ids=["p0", "extra-option", "duplicate", "slash", "dotdot", "empty", "missing-patch"],
)
def test_bad_series_refused(write_series, lines, needles):
    series = write_series({"0001-a.patch": P_A}, lines=lines)
    with pytest.raises(PatchError) as info:
        load_series(series)
    assert_one_line(info.value, str(series), *needles)


def test_missing_series_file(tmp_path):
    with pytest.raises(PatchError) as info:
        load_series(tmp_path / "series")
    assert_one_line(info.value, str(tmp_path / "series"), "cannot read series")


def _hunk(old: str, new: str) -> str:
    return f"@@ -1 +1 @@\n-{old}\n+{new}\n"


@pytest.mark.parametrize(
    "text, lineno, needles",
    [
        ("--- ../x.py\n+++ ../x.py\n" + _hunk("a", "b"), 1, ["'../x.py'", "leaves the vLLM tree"]),
        ("--- /etc/x\n+++ /etc/x\n" + _hunk("a", "b"), 1, ["'/etc/x' is an absolute path"]),
        (
            "--- a/etc/passwd\n+++ b/etc/passwd\n" + _hunk("a", "b"),
            1,
            ["'a/etc/passwd' is outside the vLLM tree"],
        ),
        (
            "--- a/vllm/../../x\n+++ b/vllm/../../x\n" + _hunk("a", "b"),
            1,
            ["'a/vllm/../../x' leaves the vLLM tree"],
        ),
        ("--- a/vllm/a.py\n+++ b/vllm/../../x\n" + _hunk("a", "b"), 2, ["'b/vllm/../../x'"]),
        ("--- a/vllm\n+++ b/vllm\n" + _hunk("a", "b"), 1, ["'a/vllm' is outside the vLLM tree"]),
        (
            "--- vllm/a.py\n+++ vllm/a.py\n" + _hunk("a", "b"),
            1,
            ["'vllm/a.py' is outside the vLLM tree"],
        ),
        (
            "diff --git a/vllm/l b/vllm/l\nnew file mode 120000\n--- /dev/null\n+++ b/vllm/l\n@@ "
            "-0,0 +1 @@\n"
            "+/etc/passwd\n\\ No newline at end of file\n",
            2,
            ["patches may not create or change symlinks"],
        ),
        ("diff --git a/vllm/l b/vllm/l\nold mode 100644\nnew mode 120000\n", 3, ["symlinks"]),
        (
            "diff --git a/vllm/x.bin b/vllm/x.bin\nindex 0000000..1111111\nGIT binary "
            "patch\nliteral 3\nKcmZ?d00001\n\n",
            3,
            ["binary patches are not supported"],
        ),
        (
            "diff --git a/vllm/x.bin b/vllm/x.bin\nBinary files a/vllm/x.bin and b/vllm/x.bin "
            "differ\n",
            2,
            ["binary patches are not supported"],
        ),
        (
            "diff --git a/vllm/a.py b/etc/cron.d/x\nrename from vllm/a.py\n"
            "rename to etc/cron.d/x\n",
            1,
            ["'b/etc/cron.d/x' is outside the vLLM tree"],
        ),
    ],
    ids=[
        "dotdot",
        "absolute",
        "a-etc-passwd",
        "a-vllm-dotdot",
        "new-name-dotdot",
        "vllm-dir-itself",
        "p0-style",
        "symlink-new",
        "symlink-mode",
        "git-binary",
        "binary-files-differ",
        "git-rename-outside",
    ],
)
def test_unsafe_patch_refused(write_series, text, lineno, needles):
    series = write_series({"0001-x.patch": "Subject: x\n\n" + text})
    patch = (series.parent / "0001-x.patch").resolve()
    with pytest.raises(PatchError) as info:
        load_series(series)
    # header lines are shifted by the two-line "Subject" preamble
    assert_one_line(info.value, f"{patch}:{lineno + 2}:", *needles)


def test_not_a_diff_refused(write_series):
    series = write_series({"0001-x.patch": "just prose\n"})
    with pytest.raises(PatchError) as info:
        load_series(series)
    assert_one_line(info.value, "0001-x.patch", "not a unified diff")


# --------------------------------------------------------------------------- apply_stack


def _series(write_series, patches: dict[str, str]):
    return load_series(write_series(patches))


def assert_no_debris(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            assert not name.endswith((".orig", ".rej", ".m3-new", ".pyc")), Path(dirpath, name)
            assert not name.startswith((".", "m3-")), Path(dirpath, name)
            assert name != "__pycache__", Path(dirpath, name)


def test_apply_then_already_applied(tree, write_series):
    stack = _series(write_series, {"0001-a.patch": P_A, "0002-b.patch": P_B})
    before = snapshot(tree)
    outcomes = apply_stack(stack, tree)
    assert [(o.patch.name, o.result) for o in outcomes] == [
        ("0001-a.patch", "applied"),
        ("0002-b.patch", "applied"),
    ]
    assert (tree / "vllm" / "a.py").read_bytes() == A_POST.encode()
    assert (tree / "vllm" / "sub" / "b.py").read_bytes() == B_POST.encode()
    after = snapshot(tree)
    assert set(after) == set(before)  # no new entries (no .orig/.rej/temp)
    assert after["vllm/untouched.txt"] == b"keep me\n"
    assert_no_debris(tree)

    again = apply_stack(stack, tree)
    assert [(o.patch.name, o.result) for o in again] == [
        ("0001-a.patch", "already-applied"),
        ("0002-b.patch", "already-applied"),
    ]
    assert snapshot(tree) == after
    assert_no_debris(tree)


def test_two_patches_on_one_file_in_order(tree, write_series):
    second = A_POST.replace("return 3", "return 30")
    stack = _series(
        write_series, {"0001-a.patch": P_A, "0002-a.patch": udiff(A_POST, second, "vllm/a.py")}
    )
    assert [o.result for o in apply_stack(stack, tree)] == ["applied", "applied"]
    assert (tree / "vllm" / "a.py").read_text() == second
    assert [o.result for o in apply_stack(stack, tree)] == ["already-applied", "already-applied"]
    assert (tree / "vllm" / "a.py").read_text() == second


def test_partially_applied_stack_applies_the_rest(tree, write_series):
    stack = _series(write_series, {"0001-a.patch": P_A, "0002-b.patch": P_B})
    (tree / "vllm" / "a.py").write_text(A_POST)
    assert [o.result for o in apply_stack(stack, tree)] == ["already-applied", "applied"]
    assert (tree / "vllm" / "sub" / "b.py").read_text() == B_POST


def test_conflict_names_patch_file_and_hunk_and_changes_nothing(tree, write_series):
    two_hunks = udiff(
        A_PY, A_PY.replace("return 1", "return 10").replace("return 3", "return 30"), "vllm/a.py"
    )
    assert two_hunks.count("@@ -") == 2
    stack = _series(write_series, {"0001-a.patch": two_hunks})
    (tree / "vllm" / "a.py").write_text(A_PY.replace("return 3", "return 33"))
    before = snapshot(tree)
    with pytest.raises(PatchError) as info:
        apply_stack(stack, tree)
    assert_one_line(
        info.value,
        "0001-a.patch: vllm/a.py: hunk #2 does not apply at line 7",
        "nothing was changed",
    )
    assert snapshot(tree) == before
    assert_no_debris(tree)


def test_second_patch_conflicts_first_is_not_applied(tree, write_series):
    stack = _series(write_series, {"0001-a.patch": P_A, "0002-b.patch": P_B})
    (tree / "vllm" / "sub" / "b.py").write_text(B_PY.replace("Z = 3", "Z = 4"))
    before = snapshot(tree)
    with pytest.raises(PatchError) as info:
        apply_stack(stack, tree)
    assert_one_line(info.value, "0002-b.patch", "vllm/sub/b.py", "hunk #1")
    assert snapshot(tree) == before
    assert (tree / "vllm" / "a.py").read_bytes() == A_PY.encode()  # all or nothing
    assert_no_debris(tree)


def test_zero_fuzz(tree, write_series):
    assert P_G.splitlines()[2] == "@@ -3,7 +3,7 @@"
    stack = _series(write_series, {"0001-g.patch": P_G})
    # The hunk's first context line (line 3, blank) differs: fuzz 1 would apply it, fuzz 0 must not.
    (tree / "vllm" / "a.py").write_text(A_PY.replace("    return 1\n\n", "    return 1\n# x\n", 1))
    probe = subprocess.run(
        [
            "patch",
            "-p1",
            "--dry-run",
            "--fuzz=1",
            "--batch",
            "-d",
            str(tree),
            "-i",
            str(stack[0].path),
        ],
        capture_output=True,
        text=True,
    )
    assert probe.returncode == 0 and "fuzz 1" in probe.stdout, (
        probe.stdout
    )  # the test is meaningful
    before = snapshot(tree)
    with pytest.raises(PatchError) as info:
        apply_stack(stack, tree)
    assert_one_line(
        info.value, "0001-g.patch: vllm/a.py: hunk #1 does not apply at line 3", "zero fuzz"
    )
    assert snapshot(tree) == before


def test_line_offset_applies(tree, write_series):
    stack = _series(write_series, {"0001-g.patch": P_G})
    header = "# one\n# two\n# three\n"
    (tree / "vllm" / "a.py").write_text(header + A_PY)
    outcomes = apply_stack(stack, tree)
    assert [o.result for o in outcomes] == ["applied"]
    assert "Hunk #1 succeeded at 6 (offset 3 lines)." in outcomes[0].detail
    assert "fuzz" not in outcomes[0].detail
    assert (tree / "vllm" / "a.py").read_bytes() == (header + G_POST).encode()
    assert [o.result for o in apply_stack(stack, tree)] == ["already-applied"]


def test_new_file_and_deleted_file(tree, write_series):
    new = "NEW = True\n"
    stack = _series(
        write_series,
        {
            "0001-new.patch": udiff(None, new, "vllm/pkg/new.py"),
            "0002-del.patch": udiff(B_PY, None, "vllm/sub/b.py"),
        },
    )
    assert stack[0].files == ("vllm/pkg/new.py",)
    assert stack[1].files == ("vllm/sub/b.py",)
    assert [o.result for o in apply_stack(stack, tree)] == ["applied", "applied"]
    assert (tree / "vllm" / "pkg" / "new.py").read_bytes() == new.encode()
    assert not (tree / "vllm" / "sub" / "b.py").exists()
    after = snapshot(tree)
    assert [o.result for o in apply_stack(stack, tree)] == ["already-applied", "already-applied"]
    assert snapshot(tree) == after
    assert_no_debris(tree)


def test_git_empty_new_file_is_carried_back(tree, write_series):
    """A git header-only entry (empty new file) is part of the patch: it must reach the tree."""
    text = (
        P_A + "diff --git a/vllm/empty.py b/vllm/empty.py\nnew file mode 100644\nindex "
        "0000000..e69de29\n"
    )
    stack = _series(write_series, {"0001-a.patch": text})
    assert set(stack[0].files) == {"vllm/a.py", "vllm/empty.py"}
    assert [o.result for o in apply_stack(stack, tree)] == ["applied"]
    assert (tree / "vllm" / "empty.py").read_bytes() == b""
    assert (tree / "vllm" / "a.py").read_text() == A_POST


@pytest.mark.parametrize("link", ["vllm/a.py", "vllm/sub"])
def test_symlink_at_touched_path_refused(tree, tmp_path, write_series, link):
    stack = _series(write_series, {"0001-a.patch": P_A, "0002-b.patch": P_B})
    elsewhere = tmp_path / "elsewhere"
    shutil.move(str(tree / link), str(elsewhere))
    os.symlink(elsewhere, tree / link)
    before = snapshot(tree)
    outside = snapshot(elsewhere) if elsewhere.is_dir() else elsewhere.read_bytes()
    with pytest.raises(PatchError) as info:
        apply_stack(stack, tree)
    assert_one_line(info.value, str(tree / link), "is a symlink")
    assert snapshot(tree) == before
    assert (snapshot(elsewhere) if elsewhere.is_dir() else elsewhere.read_bytes()) == outside


def test_syntax_error_refused_by_py_compile(tree, write_series):
    stack = _series(
        write_series,
        {
            "0001-a.patch": P_A,
            "0002-bad.patch": udiff(B_PY, B_PY.replace("Y = 2", "Y = (2"), "vllm/sub/b.py"),
        },
    )
    before = snapshot(tree)
    with pytest.raises(PatchError) as info:
        apply_stack(stack, tree)
    assert_one_line(info.value, "vllm/sub/b.py", "does not compile after patching")
    assert snapshot(tree) == before
    assert_no_debris(tree)


def test_real_series_on_pristine_vllm_0_24_0(pristine_vllm_site, tmp_path):
    stack = load_series(REPO / "patches" / "series")
    assert [p.name for p in stack] == [
        "0001-mxfp8-block-fp8-conversion.patch",
        "0002-mxfp8-oracle-triton-block-fp8-on-fnuz.patch",
        "0003-modelopt-mxfp8-moe-convert-to-block-fp8.patch",
    ]
    files = touched_files(stack)
    site = tmp_path / "site"
    site.mkdir()
    copy_files(pristine_vllm_site, site, files)
    pristine = {
        rel: (pristine_vllm_site / rel).read_bytes()
        for rel in files
        if (pristine_vllm_site / rel).exists()
    }
    assert (
        "vllm/model_executor/layers/quantization/utils/mxfp8_block_fp8.py" not in pristine
    )  # 0001 creates it

    outcomes = apply_stack(stack, site)
    assert [(o.patch.name, o.result) for o in outcomes] == [(p.name, "applied") for p in stack]
    assert "fuzz" not in " ".join(o.detail for o in outcomes).lower()
    patched = snapshot(site)
    for rel in files:
        assert (site / rel).is_file()
        if rel in pristine:
            assert (site / rel).read_bytes() != pristine[rel]
    assert_no_debris(site)

    again = apply_stack(stack, site)
    assert [(o.patch.name, o.result) for o in again] == [(p.name, "already-applied") for p in stack]
    assert snapshot(site) == patched
    # and the cache itself was never touched
    assert {rel: (pristine_vllm_site / rel).read_bytes() for rel in pristine} == pristine
