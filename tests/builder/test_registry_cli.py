"""builder.registry.parse_reference (no HTTP) and the CLI's one-line error contract."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from m3_builder_testlib import DIGEST_A, REPO, minimal_doc

from builder.registry import DOCKER_HUB, Reference, parse_reference

VENV_PYTHON = sys.executable  # the interpreter running the suite (the project venv)


@pytest.mark.parametrize(
    "ref, expected, name",
    [
        (
            "vllm/vllm-openai-rocm:minimax-m3",
            Reference(DOCKER_HUB, "vllm/vllm-openai-rocm", "minimax-m3", None),
            "docker.io/vllm/vllm-openai-rocm",
        ),
        (
            "docker.io/vllm/vllm-openai-rocm:minimax-m3",
            Reference(DOCKER_HUB, "vllm/vllm-openai-rocm", "minimax-m3", None),
            "docker.io/vllm/vllm-openai-rocm",
        ),
        ("ubuntu", Reference(DOCKER_HUB, "library/ubuntu", None, None), "docker.io/library/ubuntu"),
        (
            "ubuntu:22.04",
            Reference(DOCKER_HUB, "library/ubuntu", "22.04", None),
            "docker.io/library/ubuntu",
        ),
        (
            "index.docker.io/ubuntu",
            Reference(DOCKER_HUB, "library/ubuntu", None, None),
            "docker.io/library/ubuntu",
        ),
        (
            f"127.0.0.1:5000/a/b:t@{DIGEST_A}",
            Reference("127.0.0.1:5000", "a/b", "t", DIGEST_A),
            "127.0.0.1:5000/a/b",
        ),
        (
            f"127.0.0.1:5000/a/b@{DIGEST_A}",
            Reference("127.0.0.1:5000", "a/b", None, DIGEST_A),
            "127.0.0.1:5000/a/b",
        ),
        ("localhost/x", Reference("localhost", "x", None, None), "localhost/x"),
        ("localhost:5000/x:1", Reference("localhost:5000", "x", "1", None), "localhost:5000/x"),
        (
            "registry.invalid/m3-image/out",
            Reference("registry.invalid", "m3-image/out", None, None),
            "registry.invalid/m3-image/out",
        ),
        ("ghcr.io/org/img:v1", Reference("ghcr.io", "org/img", "v1", None), "ghcr.io/org/img"),
    ],
)
def test_parse_reference(ref, expected, name):
    parsed = parse_reference(ref)
    assert parsed == expected
    assert parsed.name == name


# --------------------------------------------------------------------------- CLI


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [VENV_PYTHON, "-m", "builder", *args],
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _bad_spec(tmp_path: Path, mutate) -> Path:
    root = tmp_path / "proj"
    (root / "patches").mkdir(parents=True)
    (root / "patches" / "series").write_text("x.patch\n")
    doc = minimal_doc()
    doc["targets"]["t"]["tables"] = []
    mutate(doc)
    spec = root / "image.yaml"
    spec.write_text(yaml.safe_dump(doc))
    return spec


@pytest.mark.parametrize(
    "mutate, needles",
    [
        (
            lambda d: d["targets"]["t"].update(bsae=d["targets"]["t"].pop("base")),
            ["targets.t.bsae: unknown key"],
        ),
        (
            lambda d: d["targets"]["t"]["labels"].update({"org.x": "a\nRUN id"}),
            ["targets.t.labels.org.x", "control"],
        ),
        (lambda d: d.update(schema=7), ["schema: unsupported schema 7"]),
    ],
    ids=["unknown-key", "label-newline", "schema"],
)
def test_cli_bad_spec_is_one_line_exit_2(tmp_path, mutate, needles):
    spec = _bad_spec(tmp_path, mutate)
    result = _run_cli("--spec", str(spec), "image")
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {spec}: ")
    for needle in needles:
        assert needle in lines[0]
    assert "Traceback" not in result.stderr


def test_cli_missing_spec_is_one_line_exit_2(tmp_path):
    result = _run_cli("--spec", str(tmp_path / "nope.yaml"), "image")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: {tmp_path / 'nope.yaml'}: cannot read spec: No such file or directory"
    ]


def test_cli_invalid_yaml_names_line(tmp_path):
    spec = tmp_path / "image.yaml"
    spec.write_text("schema: 1\ntargets:\n  t: {\n\tx: 1\n")
    result = _run_cli("--spec", str(spec), "image")
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith(f"error: {spec}: line ")
        and "invalid YAML" in lines[0]
    ), lines


def test_cli_unknown_target_is_one_line_exit_2(tmp_path):
    spec = _bad_spec(tmp_path, lambda d: None)
    result = _run_cli("--spec", str(spec), "image", "--target", "nope")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"error: {spec}: targets: no target 'nope' (have: t)"]
