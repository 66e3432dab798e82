"""The lock: every input of a build, fingerprinted, in a committed human-readable file.

``builder lock`` writes it; ``make image`` recomputes the same document from the working
tree and the base and refuses to build when the two differ, printing what changed. The
content tag is a hash of the lock, so it names all inputs and nothing else (no clock).

In the builder a lock is a :class:`Lock`: frozen dataclasses, ``None`` where a file is
absent. On disk (YAML), in the image (``lock.json``) and for the content tag it is the
*document* :meth:`Lock.to_doc` gives, byte for byte what earlier builders wrote (the
string ``"absent"`` included); :meth:`Lock.from_doc` reads it back, naming the key at fault.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

import builder
from builder.base import ResolvedBase
from builder.errors import LockError
from builder.hashing import Fingerprint, sha256_bytes
from builder.inputs import DELTA_TEMPLATE, Inputs
from builder.tree import PatchedTree

LOCK_SCHEMA = 1
ABSENT = "absent"  # how the document spells a file that does not exist (never used in memory)
HEADER = (
    "# Written by `python -m builder lock`; do not edit by hand.\n"
    "# `make image` refuses to build when any input drifts from this file.\n"
)


# -- the typed lock ------------------------------------------------------------------------------
@dataclass(frozen=True)
class LockedBase:
    image: str
    digest: str
    platform: str
    manifest: str | None = None  # the three resolved ids: None in the engine-free section
    config: str | None = None
    created: str | None = None

    @property
    def resolved(self) -> bool:
        return self.manifest is not None

    def pinned(self) -> LockedBase:
        """Only what the spec says (image, digest, platform)."""
        return LockedBase(self.image, self.digest, self.platform)

    def to_doc(self) -> dict:
        doc: dict[str, str | None] = {
            "image": self.image,
            "digest": self.digest,
            "platform": self.platform,
        }
        if self.resolved:
            doc.update(manifest=self.manifest, config=self.config, created=self.created)
        return doc


@dataclass(frozen=True)
class LockedVllm:
    root: str
    version: str
    revision: str


@dataclass(frozen=True)
class LockedBuilder:
    version: str
    sha256: str


@dataclass(frozen=True)
class LockedFile:
    file: str  # relative to the project root
    sha256: str

    @property
    def name(self) -> str:
        return self.file.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class LockedPatch(LockedFile):
    upstream: str = ""  # "" for a local-only patch


@dataclass(frozen=True)
class LockedTable(LockedFile):
    installs_as: str = ""  # relative to the vLLM root


@dataclass(frozen=True)
class LockedDigest:
    sha256: str


@dataclass(frozen=True)
class LockedOutput:
    repository: str
    aliases: tuple[str, ...]


@dataclass(frozen=True)
class LockedInputs:
    series: LockedFile
    patches: tuple[LockedPatch, ...]
    tables: tuple[LockedTable, ...]
    template: LockedFile
    smoke: LockedDigest
    output: LockedOutput
    labels: Mapping[str, str]
    env: Mapping[str, str]


@dataclass(frozen=True)
class FileChange:
    """A file the build writes under the vLLM root: before and after; None where absent."""

    pre: Fingerprint | None
    post: Fingerprint | None


@dataclass(frozen=True)
class Lock:
    target: str
    base: LockedBase
    vllm: LockedVllm
    builder: LockedBuilder
    inputs: LockedInputs
    files: Mapping[str, FileChange] | None = (
        None  # None: the engine-free section (no base resolved)
    )
    schema: int = LOCK_SCHEMA

    def inputs_section(self) -> Lock:
        """The part :func:`lock_inputs` recomputes without an engine."""
        return replace(self, base=self.base.pinned(), files=None)

    def to_doc(self) -> dict:
        """The document form (plain dicts, lists and strings), keys in the order the file shows."""
        inputs = self.inputs
        doc: dict[str, Any] = {
            "schema": self.schema,
            "target": self.target,
            "base": self.base.to_doc(),
            "vllm": {
                "root": self.vllm.root,
                "version": self.vllm.version,
                "revision": self.vllm.revision,
            },
            "builder": {"version": self.builder.version, "sha256": self.builder.sha256},
            "inputs": {
                "series": {"file": inputs.series.file, "sha256": inputs.series.sha256},
                "patches": [
                    {"file": p.file, "sha256": p.sha256, "upstream": p.upstream}
                    for p in inputs.patches
                ],
                "tables": [
                    {"file": t.file, "sha256": t.sha256, "installs_as": t.installs_as}
                    for t in inputs.tables
                ],
                "template": {"file": inputs.template.file, "sha256": inputs.template.sha256},
                "smoke": {"sha256": inputs.smoke.sha256},
                "output": {
                    "repository": inputs.output.repository,
                    "aliases": list(inputs.output.aliases),
                },
                "labels": dict(inputs.labels),
                "env": dict(inputs.env),
            },
        }
        if self.files is not None:
            doc["files"] = {
                rel: {"pre": _fp_doc(c.pre), "post": _fp_doc(c.post)}
                for rel, c in self.files.items()
            }
        return doc

    @classmethod
    def from_doc(cls, doc: Any, where: str = "lock") -> Lock:
        """Read a lock document; a missing key or a wrong type is a one-line :class:`LockError`."""
        r = _DocReader(where)
        top = r.mapping(doc, "")
        schema = r.get(top, "", "schema")
        if type(schema) is not int or schema != LOCK_SCHEMA:
            raise LockError(f"{where}: schema: expected {LOCK_SCHEMA}, got {schema!r}")
        base = r.mapping(r.get(top, "", "base"), "base")
        resolved = [k for k in ("manifest", "config", "created") if k in base]
        if resolved and len(resolved) != 3:
            missing = next(k for k in ("manifest", "config", "created") if k not in base)
            raise LockError(
                f"{where}: base.{missing}: missing (a resolved base records manifest, config and "
                "created)"
            )
        vllm = r.mapping(r.get(top, "", "vllm"), "vllm")
        bld = r.mapping(r.get(top, "", "builder"), "builder")
        inputs = r.mapping(r.get(top, "", "inputs"), "inputs")
        output = r.mapping(r.get(inputs, "inputs", "output"), "inputs.output")
        files = None
        if "files" in top:
            files = {}
            for rel, change in r.mapping(top["files"], "files").items():
                key = f"files.{rel}"
                change = r.mapping(change, key)
                files[r.text(rel, "files")] = FileChange(
                    pre=r.fingerprint(r.get(change, key, "pre"), f"{key}.pre"),
                    post=r.fingerprint(r.get(change, key, "post"), f"{key}.post"),
                )
        return cls(
            schema=schema,
            target=r.string(top, "", "target"),
            base=LockedBase(
                image=r.string(base, "base", "image"),
                digest=r.string(base, "base", "digest"),
                platform=r.string(base, "base", "platform"),
                manifest=r.string(base, "base", "manifest") if resolved else None,
                config=r.string(base, "base", "config") if resolved else None,
                created=r.string(base, "base", "created") if resolved else None,
            ),
            vllm=LockedVllm(
                root=r.string(vllm, "vllm", "root"),
                version=r.string(vllm, "vllm", "version"),
                revision=r.string(vllm, "vllm", "revision"),
            ),
            builder=LockedBuilder(
                version=r.string(bld, "builder", "version"),
                sha256=r.string(bld, "builder", "sha256"),
            ),
            inputs=LockedInputs(
                series=LockedFile(
                    **r.fields(
                        r.get(inputs, "inputs", "series"), "inputs.series", ("file", "sha256")
                    )
                ),
                patches=tuple(
                    LockedPatch(
                        **r.fields(p, f"inputs.patches[{i}]", ("file", "sha256", "upstream"))
                    )
                    for i, p in enumerate(
                        r.sequence(r.get(inputs, "inputs", "patches"), "inputs.patches")
                    )
                ),
                tables=tuple(
                    LockedTable(
                        **r.fields(t, f"inputs.tables[{i}]", ("file", "sha256", "installs_as"))
                    )
                    for i, t in enumerate(
                        r.sequence(r.get(inputs, "inputs", "tables"), "inputs.tables")
                    )
                ),
                template=LockedFile(
                    **r.fields(
                        r.get(inputs, "inputs", "template"), "inputs.template", ("file", "sha256")
                    )
                ),
                smoke=LockedDigest(
                    **r.fields(r.get(inputs, "inputs", "smoke"), "inputs.smoke", ("sha256",))
                ),
                output=LockedOutput(
                    repository=r.string(output, "inputs.output", "repository"),
                    aliases=tuple(
                        r.text(a, f"inputs.output.aliases[{i}]")
                        for i, a in enumerate(
                            r.sequence(
                                r.get(output, "inputs.output", "aliases"), "inputs.output.aliases"
                            )
                        )
                    ),
                ),
                labels=_frozen(r.string_map(r.get(inputs, "inputs", "labels"), "inputs.labels")),
                env=_frozen(r.string_map(r.get(inputs, "inputs", "env"), "inputs.env")),
            ),
            files=_frozen(files) if files is not None else None,
        )


def _frozen(mapping: dict) -> Mapping:
    return MappingProxyType(dict(mapping))


def _fp_doc(fp: Fingerprint | None) -> dict | str:
    return fp.as_dict() if fp is not None else ABSENT


class _DocReader:
    """Type checks for :meth:`Lock.from_doc`, every error naming the file and the key path."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, key: str, message: str) -> LockError:
        return LockError(f"{self.where}: {key}: {message}; re-run `python -m builder lock`")

    def mapping(self, value: Any, key: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(key or "(top)", f"expected a mapping, got {type(value).__name__}")
        return value

    def sequence(self, value: Any, key: str) -> list:
        if not isinstance(value, list):
            raise self.fail(key, f"expected a list, got {type(value).__name__}")
        return value

    def get(self, mapping: dict, key: str, name: str) -> Any:
        if name not in mapping:
            raise self.fail(f"{key}.{name}" if key else name, "missing")
        return mapping[name]

    def text(self, value: Any, key: str) -> str:
        if not isinstance(value, str):
            raise self.fail(key, f"expected a string, got {value!r}")
        return value

    def string(self, mapping: dict, key: str, name: str) -> str:
        return self.text(self.get(mapping, key, name), f"{key}.{name}" if key else name)

    def fields(self, value: Any, key: str, names: tuple[str, ...]) -> dict[str, str]:
        mapping = self.mapping(value, key)
        return {name: self.string(mapping, key, name) for name in names}

    def string_map(self, value: Any, key: str) -> dict[str, str]:
        return {
            self.text(k, key): self.text(v, f"{key}.{k}")
            for k, v in self.mapping(value, key).items()
        }

    def fingerprint(self, value: Any, key: str) -> Fingerprint | None:
        if value == ABSENT:
            return None
        return Fingerprint(**self.fields(value, key, ("git_blob", "sha256")))


# -- building a lock -----------------------------------------------------------------------------
def lock_inputs(inputs: Inputs) -> Lock:
    """The lock's engine-free part: what the working tree and the spec say."""
    target = inputs.target
    return Lock(
        target=target.name,
        base=LockedBase(
            image=target.base.image, digest=target.base.digest, platform=target.base.platform
        ),
        vllm=LockedVllm(
            root=str(target.vllm_root), version=target.vllm_version, revision=target.vllm_revision
        ),
        builder=LockedBuilder(version=builder.__version__, sha256=inputs.builder_sha256),
        inputs=LockedInputs(
            series=LockedFile(file=inputs.rel(target.series), sha256=inputs.series_sha256),
            patches=tuple(
                LockedPatch(file=inputs.rel(p.path), sha256=p.sha256, upstream=p.upstream)
                for p in inputs.patches
            ),
            tables=tuple(
                LockedTable(file=inputs.rel(t.source), sha256=t.sha256, installs_as=t.installs_as)
                for t in inputs.tables
            ),
            template=LockedFile(
                file=f"dockerfiles/{DELTA_TEMPLATE}", sha256=inputs.template_sha256
            ),
            smoke=LockedDigest(sha256=inputs.smoke_sha256),
            output=LockedOutput(repository=target.repository, aliases=tuple(target.aliases)),
            labels=_frozen(dict(sorted(target.labels.items()))),
            env=_frozen(dict(sorted(target.env.items()))),
        ),
    )


def compute_lock(inputs: Inputs, base: ResolvedBase, tree: PatchedTree) -> Lock:
    section = lock_inputs(inputs)
    resolved = replace(
        section.base, manifest=base.manifest_digest, config=base.config_digest, created=base.created
    )
    files = {rel: FileChange(pre=tree.pre[rel], post=tree.post[rel]) for rel in sorted(tree.pre)}
    return replace(section, base=resolved, files=_frozen(files))


def inputs_section(lock: Lock) -> Lock:
    """The part of a full lock that :func:`lock_inputs` recomputes without an engine."""
    return lock.inputs_section()


# -- the content tag -----------------------------------------------------------------------------
def _doc(lock: Lock | Mapping) -> Mapping:
    """A lock's document; a document (e.g. a ``lock.json`` read out of an image) as it is."""
    return lock.to_doc() if isinstance(lock, Lock) else lock


def content_digest(lock: Lock | Mapping) -> str:
    canonical = json.dumps(_doc(lock), sort_keys=True, separators=(",", ":")).encode()
    return sha256_bytes(canonical)


def content_tag(lock: Lock | Mapping) -> str:
    """The image tag: ``<vllm version>-m3-<16 hex of the lock digest>``, all inputs, no
    timestamp."""
    version = _doc(lock)["vllm"]["version"].split("+")[0].replace("/", "-")
    return f"{version}-m3-{content_digest(lock)[:16]}"


def lock_json(lock: Lock) -> bytes:
    """The lock as the image carries it (``/opt/m3-image/lock.json``)."""
    return (json.dumps(lock.to_doc(), indent=2, sort_keys=True) + "\n").encode()


# -- the file ------------------------------------------------------------------------------------
def write_lock(path: Path, lock: Lock) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(HEADER + yaml.safe_dump(lock.to_doc(), sort_keys=False, width=200))
    tmp.replace(path)


def read_lock(path: Path) -> Lock:
    return Lock.from_doc(read_lock_document(path), str(path))


def read_lock_document(path: Path) -> dict:
    """The lock file's document, schema checked, keys not (``builder lock`` diffs against it even
    when an earlier builder wrote it differently)."""
    try:
        doc = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise LockError(
            f"{path}: no lock; run `python -m builder lock --target <name>` first"
        ) from None
    except OSError as exc:
        raise LockError(f"{path}: cannot read the lock: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise LockError(f"{path}: not valid YAML (not UTF-8 text)") from None
    except yaml.YAMLError as exc:
        raise LockError(f"{path}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(doc, dict) or doc.get("schema") != LOCK_SCHEMA:
        raise LockError(
            f"{path}: schema: expected {LOCK_SCHEMA}, got "
            f"{doc.get('schema') if isinstance(doc, dict) else doc!r}"
        )
    return doc


# -- drift ---------------------------------------------------------------------------------------
def _flatten(doc, prefix: str = "", typed: bool = False) -> list[str]:
    if isinstance(doc, dict) and doc:
        # Key order is layout, not content (the content tag sorts keys too): compare sorted.
        return [
            line
            for k, v in sorted(doc.items(), key=lambda kv: str(kv[0]))
            for line in _flatten(v, f"{prefix}.{k}" if prefix else str(k), typed)
        ]
    if isinstance(doc, list) and doc:
        return [line for i, v in enumerate(doc) for line in _flatten(v, f"{prefix}[{i}]", typed)]
    # Empty containers show as {} / []; `typed` tells 1 from "1" and None from "None".
    return [f"{prefix}: {json.dumps(doc, sort_keys=True) if typed or doc in ({}, []) else doc}"]


def lock_diff(locked: Lock | Mapping, current: Lock | Mapping) -> list[str]:
    """The lines that differ, as a unified diff of ``key.path: value`` lines.

    Values that print alike but differ in type (1 and "1") are shown JSON-typed, so a
    difference the content tag sees is never an empty diff.
    """
    old, new = _doc(locked), _doc(current)
    lines = _flatten(old), _flatten(new)
    if lines[0] == lines[1] and old != new:
        lines = _flatten(old, typed=True), _flatten(new, typed=True)
    return [
        line
        for line in difflib.unified_diff(*lines, "lock", "working tree", lineterm="", n=0)
        if not line.startswith("@@")
    ]


def require_match(
    path: Path, locked: Lock | Mapping, current: Lock | Mapping, what: str = "inputs"
) -> None:
    diff = lock_diff(locked, current)
    if diff:
        raise LockError(
            f"{path}: {what} drifted from the lock "
            f"({len({line[1:].split(': ', 1)[0] for line in diff[2:]})} "
            f"changed); review the diff below and run `python -m builder lock` to accept it",
            details=diff,
        )
