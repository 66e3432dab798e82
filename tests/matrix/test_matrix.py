"""builder.matrix and ``builder matrix`` on tiny wheels served by a local fake PyPI (no network;
GNU patch is real): per patch and per file applies / already upstream / conflict (file and hunk),
pre-image blob ids, the report, and all-or-nothing output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from m3_builder_testlib import A_PY, B_PY, udiff
from m3_matrix_testlib import FakeIndex, make_wheel

from builder.hashing import git_blob_id
from builder.matrix import (
    APPLIES,
    CONFLICT,
    UPSTREAM,
    conflict_lines,
    evaluate_release,
    render_markdown,
    to_json,
)
from builder.patchstack import load_series

A = "vllm/a.py"
B = "vllm/sub/b.py"
A2 = A_PY.replace("return 2", "return 22")  # what patch 0001 does to a.py
B2 = B_PY.replace("Y = 2", "Y = 20")  # what patch 0002 does to b.py
TABLE = "E=1,N=2,device_name=AMD_Instinct_MI300X.json"


def project(tmp: Path) -> Path:
    p = tmp / "proj"
    (p / "patches").mkdir(parents=True)
    (p / "patches" / "0001-a.patch").write_text("Subject: a\n\n" + udiff(A_PY, A2, A))
    (p / "patches" / "0002-ab.patch").write_text(
        "Subject: ab\n\n"
        + udiff(A_PY, A_PY.replace("return 3", "return 33"), A)
        + udiff(B_PY, B2, B)
    )
    (p / "patches" / "0003-new.patch").write_text(
        "Subject: new\n\n" + udiff(None, "N = 1\n", "vllm/new.py")
    )
    (p / "patches" / "series").write_text("0001-a.patch\n0002-ab.patch\n0003-new.patch\n")
    return p


def wheel(tmp: Path, name: str, files: dict[str, str]) -> Path:
    path = tmp / name
    path.write_bytes(make_wheel({k: v.encode() for k, v in files.items()}))
    return path


def test_per_patch_and_per_file_results(tmp_path):
    proj = project(tmp_path)
    stack = [("patches/series", load_series(proj / "patches" / "series"))]
    # a.py already has 0001 (upstream) and b.py has other code where 0002's hunk goes
    w = wheel(
        tmp_path,
        "r.whl",
        {
            A: A2,
            B: B_PY.replace("Y = 2", "Y = 7"),
            f"vllm/model_executor/layers/fused_moe/configs/{TABLE}": "{}\n",
        },
    )
    r = evaluate_release("9.9.9", w, "f" * 64, 123, stack, [TABLE, "E=1,N=2,device_name=X.json"])
    [series] = r.series
    assert [(p.patch, p.result) for p in series.patches] == [
        ("0001-a.patch", UPSTREAM),
        ("0002-ab.patch", CONFLICT),
        ("0003-new.patch", APPLIES),
    ]
    files = {
        (p.patch, f.file): (f.result, [(h.file, h.hunk, h.line) for h in f.hunks])
        for p in series.patches
        for f in p.files
    }
    assert files == {
        ("0001-a.patch", A): (UPSTREAM, []),
        ("0002-ab.patch", A): (APPLIES, []),
        ("0002-ab.patch", B): (CONFLICT, [(B, 1, 1)]),
        ("0003-new.patch", "vllm/new.py"): (APPLIES, []),
    }
    assert not series.clean
    assert r.preimages == {
        A: git_blob_id(A2.encode()),
        B: git_blob_id(B_PY.replace("Y = 2", "Y = 7").encode()),
        "vllm/new.py": None,
        f"vllm/model_executor/layers/fused_moe/configs/{TABLE}": git_blob_id(b"{}\n"),
        "vllm/model_executor/layers/fused_moe/configs/E=1,N=2,device_name=X.json": None,
    }
    assert conflict_lines([r]) == [
        f"vllm==9.9.9: patches/series: 0002-ab.patch: {B}: "
        "hunk #1 at line 1 does not apply at zero fuzz"
    ]
    md = render_markdown([r])
    assert "| `0002-ab.patch`: `sub/b.py` | **conflict** #1@1 |" in md
    assert "| `0001-a.patch` | upstream |" in md
    assert f"| `vllm/a.py` | {git_blob_id(A2.encode())[:8]} |" in md
    assert "| `vllm/new.py` | absent |" in md
    assert json.loads(json.dumps(to_json([r])))[0]["series"][0]["patches"][1]["files"][1] == {
        "file": B,
        "result": CONFLICT,
        "hunks": [{"hunk": 1, "line": 1}],
    }


def test_clean_release_and_patches_after_a_conflict_still_run(tmp_path):
    proj = project(tmp_path)
    stack = [("s", load_series(proj / "patches" / "series"))]
    r = evaluate_release(
        "1.0", wheel(tmp_path, "c.whl", {A: A_PY, B: B_PY}), "0" * 64, 1, stack, []
    )
    assert [p.result for p in r.series[0].patches] == [APPLIES, APPLIES, APPLIES] and r.series[
        0
    ].clean
    assert conflict_lines([r]) == []
    # b.py missing altogether: 0002 conflicts, 0003 is still evaluated (and applies)
    r = evaluate_release("1.1", wheel(tmp_path, "d.whl", {A: A_PY}), "0" * 64, 1, stack, [])
    assert [p.result for p in r.series[0].patches] == [APPLIES, CONFLICT, APPLIES]


def run_cli(*args, cwd: Path):
    return subprocess.run(
        [sys.executable, "-m", "builder", "--spec", str(cwd / "image.yaml"), "matrix", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={"PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PATH": "/usr/bin:/bin"},
    )


@pytest.fixture
def cli_project(tmp_path):
    proj = project(tmp_path)
    (proj / "image.yaml").write_text(
        "schema: 1\ndefault_target: t\ntargets:\n  t:\n    tables:\n      - tuning/"
        + TABLE
        + "\n    tables_also_for: [AMD_Instinct_MI325X]\n"
    )
    releases = {
        "1.0.0": make_wheel({A: A_PY.encode(), B: B_PY.encode()}),
        "1.1.0": make_wheel({A: A2.encode(), B: B_PY.encode()}),
        "2.0.0": make_wheel({A: A2.encode(), B: B_PY.replace("Y = 2", "Y = 7").encode()}),
    }
    index = FakeIndex(releases)
    yield proj, index
    index.close()


def test_cli_writes_the_report_and_json(cli_project):
    proj, index = cli_project
    res = run_cli(
        "1.0.0..1.1.0",
        "--index",
        index.url,
        "--cache-dir",
        "cache",
        "--output",
        "docs/m.md",
        "--json",
        "docs/m.json",
        cwd=proj,
    )
    assert res.returncode == 0, res.stderr
    md = (proj / "docs" / "m.md").read_text()
    assert "| `0001-a.patch` | applies | upstream |" in md
    assert "E=1,N=2,device_name=AMD_Instinct_MI325X.json` | absent | absent |" in md
    assert [r["version"] for r in json.loads((proj / "docs" / "m.json").read_text())] == [
        "1.0.0",
        "1.1.0",
    ]
    assert "2 wheel(s) downloaded" in res.stderr
    assert sorted(p.name for p in (proj / "docs").iterdir()) == [
        "m.json",
        "m.md",
    ]  # no temp files left
    again = run_cli(
        "1.0.0..1.1.0",
        "--index",
        index.url,
        "--cache-dir",
        "cache",
        "--output",
        "docs/m.md",
        cwd=proj,
    )
    assert "0 wheel(s) downloaded" in again.stderr and (proj / "docs" / "m.md").read_text() == md


def test_cli_check_fails_on_a_conflict_and_writes_nothing(cli_project):
    proj, index = cli_project
    res = run_cli(
        "2.0.0",
        "--index",
        index.url,
        "--cache-dir",
        "cache",
        "--output",
        "m.md",
        "--check",
        cwd=proj,
    )
    assert res.returncode == 2 and not (proj / "m.md").exists()
    assert res.stderr.splitlines()[-1] == (
        f"error: 1 conflict(s); first: vllm==2.0.0: patches/series: 0002-ab.patch: "
        f"{B}: hunk #1 at line 1 does not apply at zero fuzz"
    )
    assert "Traceback" not in res.stderr


def test_cli_unknown_version_and_bad_hash_are_one_line(cli_project, tmp_path):
    proj, index = cli_project
    res = run_cli(
        "1.0.0", "3.0.0", "--index", index.url, "--cache-dir", "cache", "--output", "m.md", cwd=proj
    )
    assert res.returncode == 2 and not (proj / "m.md").exists() and not (proj / "cache").exists()
    assert (
        res.stderr.strip()
        == f"error: vllm==3.0.0: not a release on {index.url} (newest: 1.0.0, 1.1.0, 2.0.0)"
    )
    liar = FakeIndex({"1.0.0": make_wheel({A: b"x"})}, lie={"1.0.0"})
    try:
        res = run_cli(
            "1.0.0", "--index", liar.url, "--cache-dir", "cache", "--output", "m.md", cwd=proj
        )
    finally:
        liar.close()
    assert res.returncode == 2 and not (proj / "m.md").exists()
    [line] = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert line.startswith(
        "error: vllm-1.0.0-cp38-abi3-manylinux_2_28_x86_64.whl: sha256 "
    ) and line.endswith(f"does not match PyPI's {'0' * 64}; nothing was cached")
    assert [p for p in (proj / "cache").rglob("*") if p.is_file()] == []


def test_file_sections_keep_no_newline_markers_and_git_headers(tmp_path):
    from builder.patchstack import file_sections

    p = tmp_path / "p"
    (p / "patches").mkdir(parents=True)
    text = (
        "Subject: x\n\n---\n a | 1 +\n\n"
        "diff --git a/vllm/a.py b/vllm/a.py\nindex 1111111..2222222 100644\n"
        "--- a/vllm/a.py\n+++ b/vllm/a.py\n@@ -1 +1 @@\n"
        "-x = 1\n\\ No newline at end of file\n+x = 2\n"
        "\\ No newline at end of file\n"
        "diff --git a/vllm/b.py b/vllm/b.py\nnew file mode 100644\n--- /dev/null\n+++ b/vllm/b.py\n"
        "@@ -0,0 +1 @@\n+-- y\n-- \n2.39.0\n"
    )
    (p / "patches" / "0001.patch").write_text(text)
    (p / "patches" / "series").write_text("0001.patch\n")
    [patch] = load_series(p / "patches" / "series")
    sections = file_sections(patch)
    assert [rel for rel, _ in sections] == ["vllm/a.py", "vllm/b.py"]
    assert sections[0][1] == (
        "diff --git a/vllm/a.py b/vllm/a.py\nindex 1111111..2222222 100644\n--- a/vllm/a.py\n"
        "+++ b/vllm/a.py\n@@ -1 +1 @@\n-x = 1\n\\ No newline at end of file\n+x = 2\n"
        "\\ No newline at end of file\n"
    )
    assert sections[1][1] == (
        "diff --git a/vllm/b.py b/vllm/b.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/vllm/b.py\n@@ -0,0 +1 @@\n+-- y\n"
    )
    tree = tmp_path / "t"
    (tree / "vllm").mkdir(parents=True)
    (tree / "vllm" / "a.py").write_text("x = 1")
    for i, (_, part) in enumerate(sections):
        (tmp_path / f"s{i}").write_text(part)
    from builder.patchstack import dry_run

    assert [dry_run(tmp_path / f"s{i}", tree).result for i in range(2)] == ["applies", "applies"]
