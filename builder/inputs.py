"""Everything a build reads from the working tree, fingerprinted (no engine, no network)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import builder
from builder.hashing import sha256_file, tree_digest
from builder.patchstack import Patch, load_series
from builder.spec import Target

PACKAGE_DIR = Path(builder.__file__).resolve().parent
PROJECT_DIR = PACKAGE_DIR.parent
TEMPLATE_DIR = PROJECT_DIR / "dockerfiles"
DELTA_TEMPLATE = "delta.Dockerfile.j2"
SMOKE_DIR = PROJECT_DIR / "smoke"
CONFIGS_DIR = "model_executor/layers/fused_moe/configs"  # where vLLM looks tables up


def _source_files(root: Path) -> list[Path]:
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        and p.suffix in (".py", ".json", ".pt", ".npz", ".j2", ".txt")
    )


# The builder modules whose code decides the image's bytes (what is read, patched, placed,
# rendered, assembled, labelled): a change to one of them is a change of input. The rest
# (commands, delivery, registry client, validation, verification, logging, errors) move or
# check images without changing them, so editing them leaves every lock and content tag alone.
# tests/builder/test_inputs.py fails when a module is in neither list.
IMAGE_SHAPING = (
    "assemble.py",
    "base.py",
    "context.py",
    "dockerfile.py",
    "engine.py",
    "hashing.py",
    "image_layout.py",
    "inputs.py",
    "layer.py",
    "lock.py",
    "manifest.py",
    "patchstack.py",
    "provenance.py",
    "reference.py",
    "spec.py",
    "table_names.py",
    "tree.py",
    "workflow.py",
)
NOT_IMAGE_SHAPING = (
    "__init__.py",
    "__main__.py",
    "cli.py",
    "commands/*.py",
    "delivery.py",
    "errors.py",
    "log.py",
    "matrix.py",
    "pypi.py",
    "registry.py",
    "validate.py",
    "verify.py",
)


def image_shaping_files() -> list[Path]:
    return [PACKAGE_DIR / name for name in IMAGE_SHAPING]


def builder_digest() -> str:
    """sha256 over the builder modules that shape the image (``IMAGE_SHAPING``)."""
    return tree_digest(PACKAGE_DIR, image_shaping_files())


def smoke_files() -> list[Path]:
    return _source_files(SMOKE_DIR) if SMOKE_DIR.is_dir() else []


@dataclass(frozen=True)
class TableInput:
    source: Path
    name: str
    sha256: str

    @property
    def installs_as(self) -> str:
        return f"{CONFIGS_DIR}/{self.name}"


@dataclass(frozen=True)
class Inputs:
    target: Target
    patches: tuple[Patch, ...]
    series_sha256: str
    tables: tuple[TableInput, ...]
    template_sha256: str
    builder_sha256: str
    smoke_sha256: str

    def rel(self, path: Path) -> str:
        return path.resolve().relative_to(self.target.project_root.resolve()).as_posix()


def collect_inputs(target: Target) -> Inputs:
    patches = tuple(load_series(target.series))
    tables = tuple(
        TableInput(source=t.source, name=t.name, sha256=sha256_file(t.source))
        for t in target.tables
    )
    smoke = smoke_files()
    return Inputs(
        target=target,
        patches=patches,
        series_sha256=sha256_file(target.series),
        tables=tables,
        template_sha256=sha256_file(TEMPLATE_DIR / DELTA_TEMPLATE),
        builder_sha256=builder_digest(),
        smoke_sha256=tree_digest(SMOKE_DIR, smoke) if smoke else "none",
    )
