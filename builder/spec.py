"""The build spec (``image.yaml``): targets, validated with errors that name file, key and value.

Data flows one way through the builder: spec -> lock -> context -> image -> report. This
module is the first step: it turns YAML into frozen dataclasses and refuses anything it
does not understand, so later steps never see a half-valid target.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from builder.errors import SpecError
from builder.reference import REFERENCE_RE, TAG_RE
from builder.table_names import retarget

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
BLOB_RE = re.compile(r"^[0-9a-f]{7,40}$")
LABEL_KEY_RE = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*$")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ABSENT = "absent"


@dataclass(frozen=True)
class BaseImage:
    image: str  # name[:tag], as written (what humans track)
    digest: str  # sha256:... manifest (or index) digest the build is pinned to
    platform: str  # os/arch picked out of an index
    digest_file: Path | None = None  # where the pin came from, when not inline

    @property
    def name(self) -> str:
        match = REFERENCE_RE.match(self.image)
        assert match
        return match.group("name")

    @property
    def reference(self) -> str:
        """The immutable reference: ``name@sha256:...``."""
        return f"{self.name}@{self.digest}"


@dataclass(frozen=True)
class Table:
    source: Path  # file under tuning/
    name: str  # basename vLLM looks up


@dataclass(frozen=True)
class Target:
    name: str
    spec_file: Path
    description: str
    base: BaseImage
    vllm_root: PurePosixPath
    python: str
    vllm_version: str
    vllm_revision: str
    series: Path
    expect: dict[str, str | None]  # relpath under vllm_root -> blob prefix; None: must not exist
    tables: tuple[Table, ...]
    repository: str
    aliases: tuple[str, ...]
    labels: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    lock_file: Path = Path()

    @property
    def project_root(self) -> Path:
        return self.spec_file.parent


@dataclass(frozen=True)
class Spec:
    file: Path
    default_target: str
    targets: dict[str, Target | UnpinnedTarget]
    # Each target's document after ``extends`` is resolved (what _load_target validated).
    resolved: dict[str, dict] = field(default_factory=dict, compare=False, repr=False)

    def target(self, name: str | None) -> Target:
        name = name or self.default_target
        if name not in self.targets:
            raise SpecError(
                f"{self.file}: targets: no target {name!r} (have: "
                f"{', '.join(sorted(self.targets))})"
            )
        target = self.targets[name]
        if isinstance(target, UnpinnedTarget):
            raise SpecError(target.reason)
        return target


@dataclass(frozen=True)
class UnpinnedTarget:
    """A target whose base is a mutable tag with no digest yet: only ``builder pin`` may use it."""

    name: str
    image: str
    digest_file: Path
    reason: str


class _Reader:
    """Walks one YAML document, tracking the key path for error messages.

    ``origins`` maps key paths of a resolved target (``targets.<name>.<path>``) that a shared
    definition set to that definition's key path, so an error names the line a human edits.
    """

    def __init__(self, file: Path, origins: dict[str, str] | None = None, user: str = ""):
        self.file = file
        self.origins = origins or {}
        self.user = user

    def where(self, key: str) -> str:
        best = ""
        for path in self.origins:
            if (key == path or key.startswith(path + ".") or key.startswith(path + "[")) and len(
                path
            ) > len(best):
                best = path
        if not best:
            return key
        return (
            self.origins[best] + key[len(best) :] + (f" (used by {self.user})" if self.user else "")
        )

    def fail(self, key: str, message: str) -> SpecError:
        return SpecError(f"{self.file}: {self.where(key)}: {message}")

    def mapping(self, value: Any, key: str, allowed: set[str], required: set[str]) -> dict:
        if not isinstance(value, dict):
            raise self.fail(key, f"expected a mapping, got {type(value).__name__} {value!r}")
        for k in value:
            if k not in allowed:
                raise self.fail(
                    f"{key}.{k}" if key else str(k),
                    f"unknown key (allowed: {', '.join(sorted(allowed))})",
                )
        for k in sorted(required):
            if k not in value:
                raise self.fail(f"{key}.{k}" if key else k, "required key is missing")
        return value

    def string(
        self, value: Any, key: str, pattern: re.Pattern | None = None, what: str = ""
    ) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"expected a non-empty string, got {value!r}")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            raise self.fail(key, f"control characters are not allowed in {value!r}")
        if pattern is not None and not pattern.match(value):
            raise self.fail(key, f"{value!r} is not a valid {what or 'value'}")
        return value

    def existing_file(self, value: Any, key: str, root: Path) -> Path:
        rel = self.string(value, key)
        path = root / rel
        if PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts:
            raise self.fail(key, f"{rel!r} must be a relative path inside {root}")
        if not path.is_file():
            raise self.fail(key, f"file {rel!r} does not exist")
        return path


def load_spec(file: Path) -> Spec:
    file = Path(file)
    try:
        text = file.read_text()
    except OSError as exc:
        raise SpecError(f"{file}: cannot read spec: {exc.strerror}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "?"
        raise SpecError(f"{file}: {where}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
    r = _Reader(file)
    doc = r.mapping(
        doc,
        "",
        {"schema", "default_target", "definitions", "targets"},
        {"schema", "default_target", "targets"},
    )
    if type(doc["schema"]) is not int or doc["schema"] != 1:  # not True, 1.0 or "1"
        raise r.fail("schema", f"unsupported schema {doc['schema']!r} (this builder reads 1)")
    definitions = r.mapping(
        doc.get("definitions", {}), "definitions", set(doc.get("definitions") or {}), set()
    )
    for name, value in definitions.items():
        r.string(name, f"definitions.{name}", NAME_RE, "definition name")
        r.mapping(value, f"definitions.{name}", _TARGET_KEYS | {"extends"}, set())
    targets_doc = r.mapping(doc["targets"], "targets", set(doc["targets"] or {}), set())
    if not targets_doc:
        raise r.fail("targets", "no targets defined")
    targets, resolved = {}, {}
    for name, value in targets_doc.items():
        key = f"targets.{name}"
        r.string(name, key, NAME_RE, "target name")
        r.mapping(value, key, _TARGET_KEYS | {"extends"}, set())
        resolved[name], origins = _resolve(r, key, value, definitions, [])
        reader = _Reader(file, {f"{key}.{path}": where for path, where in origins.items()}, key)
        targets[name] = _load_target(reader, name, resolved[name])
    default = r.string(doc["default_target"], "default_target")
    if default not in targets:
        raise r.fail(
            "default_target",
            f"{default!r} is not one of the targets ({', '.join(sorted(targets))})",
        )
    return Spec(file=file, default_target=default, targets=targets, resolved=resolved)


NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def _resolve(
    r: _Reader, key: str, doc: dict, definitions: dict, chain: list[str]
) -> tuple[dict, dict[str, str]]:
    """``doc`` with the definition it ``extends`` (and that one's, ...) merged in.

    A target or definition may add keys, also inside a mapping the definition sets, but never
    set a key the definition already sets: what the definition says holds for every user.
    Returns the merged document and, for each key path (relative to ``doc``) that came from a
    definition alone, the key path where that definition sets it.
    """
    own = {k: v for k, v in doc.items() if k != "extends"}
    if "extends" not in doc:
        return own, {}
    parent = r.string(doc["extends"], f"{key}.extends", NAME_RE, "definition name")
    if parent not in definitions:
        have = ", ".join(sorted(definitions)) or "none"
        raise r.fail(f"{key}.extends", f"unknown definition {parent!r} (definitions: {have})")
    if parent in chain:
        cycle = " -> ".join([*chain[chain.index(parent) :], parent])
        raise r.fail(f"{key}.extends", f"definitions extend each other in a cycle: {cycle}")
    base, origins = _resolve(
        r, f"definitions.{parent}", definitions[parent], definitions, [*chain, parent]
    )
    for path in _paths(base):
        origins.setdefault(path, f"definitions.{parent}.{path}")
    merged = _merge(r, key, base, own, origins)
    # A mapping both sides add to is the user's: only paths the definitions alone set keep an
    # origin.
    for path in _paths(own):
        for ancestor in _ancestors(path):
            origins.pop(ancestor, None)
    return merged, origins


def _paths(doc: dict, prefix: str = "") -> list[str]:
    """Every key path in ``doc``, mappings and leaves (``vllm``, ``vllm.root``, ...)."""
    paths = []
    for k, v in doc.items():
        path = f"{prefix}.{k}" if prefix else str(k)
        paths.append(path)
        if isinstance(v, dict):
            paths.extend(_paths(v, path))
    return paths


def _ancestors(path: str) -> list[str]:
    parts = path.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _merge(
    r: _Reader, key: str, base: dict, own: dict, origins: dict[str, str], path: str = ""
) -> dict:
    merged = dict(base)
    for k, v in own.items():
        sub = f"{path}.{k}" if path else str(k)
        if k not in base:
            merged[k] = v
        elif isinstance(base[k], dict) and isinstance(v, dict):
            merged[k] = _merge(r, key, base[k], v, origins, sub)
        else:
            raise SpecError(
                f"{r.file}: {key}.{sub}: also set by {origins.get(sub, sub)}; a key its "
                f"definition sets may not be set again (set it in one place)"
            )
    return merged


_TARGET_KEYS = {
    "description",
    "base",
    "vllm",
    "series",
    "expect",
    "tables",
    "tables_also_for",
    "output",
    "labels",
    "env",
    "lock",
}


def _read_pin(r: _Reader, key: str, pin: Path) -> str:
    try:
        digest = pin.read_bytes().decode("ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise r.fail(
            key,
            f"{pin}: cannot read the pin as ASCII text "
            f"({getattr(exc, 'strerror', None) or type(exc).__name__}); "
            "it is not a sha256 digest (expected sha256:<64 hex>)",
        ) from None
    if not DIGEST_RE.match(digest):
        raise r.fail(key, f"{pin}: {digest!r} is not a sha256 digest (expected sha256:<64 hex>)")
    return digest


def _load_target(r: _Reader, name: str, doc: Any) -> Target | UnpinnedTarget:
    key = f"targets.{name}"
    r.string(name, key, NAME_RE, "target name")
    root = r.file.parent
    doc = r.mapping(
        doc, key, _TARGET_KEYS, _TARGET_KEYS - {"description", "labels", "env", "tables_also_for"}
    )

    base_doc = r.mapping(
        doc["base"], f"{key}.base", {"image", "digest", "digest_file", "platform"}, {"image"}
    )
    image = r.string(base_doc["image"], f"{key}.base.image", REFERENCE_RE, "image reference")
    ref_match = REFERENCE_RE.match(image)
    assert ref_match is not None  # r.string checked image against REFERENCE_RE
    ref_digest = ref_match.group("digest")
    if ref_digest:
        raise r.fail(
            f"{key}.base.image", f"{image!r}: give the digest in base.digest, not in the reference"
        )
    platform = r.string(
        base_doc.get("platform", "linux/amd64"),
        f"{key}.base.platform",
        re.compile(r"^[a-z0-9]+/[a-z0-9_]+$"),
        "platform (os/arch)",
    )
    if "digest" in base_doc and "digest_file" in base_doc:
        raise r.fail(f"{key}.base", "give either digest or digest_file, not both")
    pin = None
    unpinned: UnpinnedTarget | None = None
    if "digest" in base_doc:
        digest = r.string(base_doc["digest"], f"{key}.base.digest", DIGEST_RE, "sha256 digest")
    elif "digest_file" in base_doc:
        rel = r.string(base_doc["digest_file"], f"{key}.base.digest_file")
        if PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts:
            raise r.fail(
                f"{key}.base.digest_file", f"{rel!r} must be a relative path inside {root}"
            )
        pin = root / rel
        if pin.is_file():
            digest = _read_pin(r, f"{key}.base.digest_file", pin)
        else:
            # Still validate the rest: an unpinned target is never half-valid either.
            unpinned = UnpinnedTarget(
                name=name,
                image=image,
                digest_file=pin,
                reason=(
                    f"{r.file}: {key}.base.image: {image!r} is a mutable tag and its pin {rel} "
                    "does not exist; "
                    f"run `python -m builder pin {name}` where the registry is reachable"
                ),
            )
            digest = ""
    else:
        raise r.fail(
            f"{key}.base.image",
            f"{image!r} is a mutable tag: pin it with base.digest or base.digest_file",
        )
    base = BaseImage(image=image, digest=digest, platform=platform, digest_file=pin)

    vllm = r.mapping(
        doc["vllm"],
        f"{key}.vllm",
        {"root", "python", "version", "revision"},
        {"root", "python", "version"},
    )
    vllm_root = PurePosixPath(r.string(vllm["root"], f"{key}.vllm.root"))
    if not vllm_root.is_absolute() or ".." in vllm_root.parts or vllm_root.name != "vllm":
        raise r.fail(
            f"{key}.vllm.root", f"{str(vllm_root)!r} must be an absolute path ending in /vllm"
        )
    python = r.string(vllm["python"], f"{key}.vllm.python")
    version = r.string(str(vllm["version"]), f"{key}.vllm.version")
    revision = r.string(vllm.get("revision", "unknown"), f"{key}.vllm.revision")

    series = r.existing_file(doc["series"], f"{key}.series", root)

    expect_doc = r.mapping(doc["expect"], f"{key}.expect", set(doc["expect"] or {}), set())
    expect: dict[str, str | None] = {}
    for rel, blob in expect_doc.items():
        rel_key = f"{key}.expect.{rel}"
        rel_path = PurePosixPath(r.string(rel, rel_key))
        if rel_path.is_absolute() or ".." in rel_path.parts:
            raise r.fail(rel_key, f"{rel!r} must be relative to vllm.root")
        value = r.string(str(blob), rel_key)
        if value != ABSENT and not BLOB_RE.match(value):
            raise r.fail(rel_key, f"{value!r} is not a git blob id (7-40 hex) or 'absent'")
        expect[rel_path.as_posix()] = None if value == ABSENT else value

    if not isinstance(doc["tables"], list):
        raise r.fail(f"{key}.tables", f"expected a list, got {doc['tables']!r}")
    tables = []
    for i, item in enumerate(doc["tables"]):
        path = r.existing_file(item, f"{key}.tables[{i}]", root)
        tables.append(Table(source=path, name=path.name))
    # tables_also_for: device names that get every table too, under their own lookup name
    # (same chip family; e.g. MI325X: gfx942 like MI300X). The bytes stay the measured ones.
    also = doc.get("tables_also_for", [])
    if not isinstance(also, list):
        raise r.fail(
            f"{key}.tables_also_for", f"expected a list of vLLM device names, got {also!r}"
        )
    for j, device in enumerate(also):
        device = r.string(device, f"{key}.tables_also_for[{j}]")
        for i, table in enumerate(list(tables[: len(doc["tables"])])):
            try:
                tables.append(Table(source=table.source, name=retarget(table.name, device)))
            except ValueError as exc:
                raise r.fail(
                    f"{key}.tables_also_for[{j}]",
                    f"cannot install tables[{i}] for {device!r}: {exc}",
                ) from None
    names = [t.name for t in tables]
    for i, table_name in enumerate(names):
        if table_name in names[:i]:
            first, n = names.index(table_name), len(doc["tables"])
            where = (
                f"tables[{i}]" if i < n else f"tables_also_for (copy of {tables[i].source.name})"
            )
            raise r.fail(
                f"{key}.tables",
                f"two tables install under the same name {table_name!r} "
                f"(tables[{first}] and {where})",
            )

    output = r.mapping(doc["output"], f"{key}.output", {"repository", "aliases"}, {"repository"})
    repository = r.string(
        output["repository"], f"{key}.output.repository", REFERENCE_RE, "repository"
    )
    repo_match = REFERENCE_RE.match(repository)
    assert repo_match is not None  # r.string checked repository against REFERENCE_RE
    if repo_match.group("tag") or "@" in repository:
        raise r.fail(
            f"{key}.output.repository", f"{repository!r}: give a repository without tag or digest"
        )
    aliases_doc = output.get("aliases", [])
    if not isinstance(aliases_doc, list):
        raise r.fail(f"{key}.output.aliases", f"expected a list, got {aliases_doc!r}")
    aliases = tuple(
        r.string(a, f"{key}.output.aliases[{i}]", TAG_RE, "tag") for i, a in enumerate(aliases_doc)
    )

    labels = {}
    for k, v in (
        r.mapping(doc.get("labels", {}), f"{key}.labels", set(doc.get("labels") or {}), set())
    ).items():
        labels[r.string(k, f"{key}.labels", LABEL_KEY_RE, "label key")] = r.string(
            str(v), f"{key}.labels.{k}"
        )
    env = {}
    for k, v in (
        r.mapping(doc.get("env", {}), f"{key}.env", set(doc.get("env") or {}), set())
    ).items():
        env[r.string(k, f"{key}.env", ENV_KEY_RE, "environment variable name")] = r.string(
            str(v), f"{key}.env.{k}"
        )

    lock = r.string(doc["lock"], f"{key}.lock")
    if unpinned is not None:
        return unpinned
    return Target(
        name=name,
        spec_file=r.file,
        description=str(doc.get("description", "")),
        base=base,
        vllm_root=vllm_root,
        python=python,
        vllm_version=version,
        vllm_revision=revision,
        series=series,
        expect=expect,
        tables=tuple(tables),
        repository=repository,
        aliases=aliases,
        labels=labels,
        env=env,
        lock_file=root / lock,
    )
