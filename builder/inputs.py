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
CONFIGS_DIR = "model_executor/layers/fused_moe/configs"     # where vLLM looks tables up


def _source_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix in (".py", ".json", ".pt", ".npz", ".j2", ".txt"))


def builder_digest() -> str:
    """sha256 over the builder's own sources: a change to the builder is a change of input."""
    return tree_digest(PACKAGE_DIR, [p for p in _source_files(PACKAGE_DIR) if p.suffix == ".py"])


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
    tables = tuple(TableInput(source=t.source, name=t.name, sha256=sha256_file(t.source)) for t in target.tables)
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
