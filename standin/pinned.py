"""The pinned-faithful stand-in base: the 0.24.0 stand-in plus one layer holding the pinned
revision's bytes (vLLM 4a560dd8) of the three files the production stack touches and 0.24.0
has differently.

The reconstruction diff (``standin/data/vllm-4a560dd/``) is checked against the sha256 in its
PROVENANCE.yaml, the three files are read out of the stand-in base through the engine's archive
API and checked against their 0.24.0 blob ids, the diff is applied with the builder's patch
stack (GNU patch, zero fuzz), and every result must be the pinned blob id. The layer is built
``FROM`` the stand-in base by digest (one ``COPY``, nothing else), read back and checked again,
then tagged ``m3-image/standin-base:vllm-4a560dd`` and pushed like the stand-in.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import yaml

from builder.dockerfile import render_template
from builder.engine import Engine
from builder.errors import BuilderError, PatchError
from builder.hashing import git_blob_id, sha256_file
from builder.patchstack import PATCH_ROOT, apply_stack, load_series
from standin.build import (
    FINGERPRINT_LABEL,
    LOCAL_REPOSITORY,
    SITE_PACKAGES,
    Log,
    StandinBase,
    check_registry,
    labels_of,
    push,
    write_context,
)

DATA_DIR = Path(__file__).resolve().parent / "data" / "vllm-4a560dd"
PROVENANCE = DATA_DIR / "PROVENANCE.yaml"
SERIES = DATA_DIR / "series"
TEMPLATE = "standin-pinned.Dockerfile.j2"
TAG = "vllm-4a560dd"
LOCAL_TAG = f"{LOCAL_REPOSITORY}:{TAG}"
VLLM_ROOT = f"{SITE_PACKAGES}/vllm"


@dataclass(frozen=True)
class Reconstruction:
    """What PROVENANCE.yaml promises: the diff's sha256 and each file's pre -> post blob id."""

    diff: Path
    sha256: str
    version: str
    commit: str
    files: dict[str, tuple[str, str]]  # path under vllm/ -> (0.24.0 blob, pinned blob)


def load_reconstruction(provenance: Path = PROVENANCE) -> Reconstruction:
    """Read PROVENANCE.yaml and check the diff's bytes against it (one-line errors)."""
    try:
        doc = yaml.safe_load(provenance.read_text())
        diff = provenance.parent / doc["diff"]["file"]
        recorded = doc["diff"]["sha256"]
        files = {rel: (v["pre"], v["post"]) for rel, v in doc["files"].items()}
        version, commit = doc["revision"]["version"], doc["revision"]["commit"]
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError) as exc:
        raise BuilderError(
            f"{provenance}: unreadable provenance ({type(exc).__name__}: {exc})"
        ) from None
    if not diff.is_file():
        raise BuilderError(f"{provenance}: diff.file: {diff.name} does not exist")
    actual = sha256_file(diff)
    if actual != recorded:
        raise BuilderError(
            f"{diff}: sha256 {actual} does not match {recorded} recorded in {provenance.name}"
        )
    return Reconstruction(diff=diff, sha256=recorded, version=version, commit=commit, files=files)


def _check_blobs(
    found: Mapping[str, bytes | None], want: dict[str, str], where: str, what: str
) -> None:
    for rel, blob in want.items():
        data = found.get(rel)
        if data is None:
            raise BuilderError(f"{where}: {rel}: no such file (expected {what} blob {blob})")
        if git_blob_id(data) != blob:
            raise BuilderError(
                f"{where}: {rel}: blob {git_blob_id(data)}, expected {what} blob {blob}"
            )


def reconstruct(
    files: dict[str, bytes | None], workdir: Path, reconstruction: Reconstruction | None = None
) -> dict[str, bytes]:
    """0.24.0 bytes in (path under vllm/ -> bytes), the pinned revision's bytes out.

    Pre-images are checked, the diff applied with the builder's patch stack (must be
    "applied", never "already applied"), post-images checked.
    """
    rec = reconstruction or load_reconstruction()
    _check_blobs(
        files, {rel: pre for rel, (pre, _) in rec.files.items()}, "stand-in base", "vLLM 0.24.0"
    )
    for rel in rec.files:
        out = workdir / PATCH_ROOT / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        data = files[rel]
        assert data is not None  # _check_blobs refused missing files
        out.write_bytes(data)
    patches = load_series(rec.diff.parent / SERIES.name)
    touched = {
        PurePosixPath(f).relative_to(PATCH_ROOT).as_posix() for p in patches for f in p.files
    }
    if touched != set(rec.files):
        raise BuilderError(
            f"{rec.diff}: touches {sorted(touched)}, {PROVENANCE.name} lists {sorted(rec.files)}"
        )
    outcomes = apply_stack(patches, workdir)
    not_applied = [o.patch.name for o in outcomes if o.result != "applied"]
    if not_applied:
        raise PatchError(
            f"{not_applied[0]}: already applied to the stand-in base; expected vLLM 0.24.0's bytes"
        )
    result = {rel: (workdir / PATCH_ROOT / rel).read_bytes() for rel in rec.files}
    _check_blobs(
        result, {rel: post for rel, (_, post) in rec.files.items()}, rec.diff.name, "pinned 4a560dd"
    )
    return result


def _fingerprint(parent_id: str, rec: Reconstruction) -> str:
    template = render_template(
        TEMPLATE,
        parent="-",
        vllm_root=VLLM_ROOT,
        version="-",
        commit="-",
        fingerprint_label=FINGERPRINT_LABEL,
        fingerprint="-",
    )
    payload = {"parent": parent_id, "diff": rec.sha256, "files": rec.files, "template": template}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def read_blobs(engine: Engine, image: str, rels: list[str]) -> dict[str, bytes | None]:
    """The files ``rels`` (under vllm/) out of ``image``, through the archive API."""
    entries = engine.read_files(image, [f"{VLLM_ROOT}/{rel}" for rel in rels])
    return {rel: (entry.data if (entry := entries[f"{VLLM_ROOT}/{rel}"]) else None) for rel in rels}


def check_image(
    engine: Engine, image: str, rec: Reconstruction | None = None, name: str = ""
) -> None:
    """``image`` holds the pinned revision's bytes at the stand-in's vLLM root, or BuilderError."""
    rec = rec or load_reconstruction()
    _check_blobs(
        read_blobs(engine, image, sorted(rec.files)),
        {rel: post for rel, (_, post) in rec.files.items()},
        name or image,
        "pinned 4a560dd",
    )


def build_pinned_base(
    engine: Engine, standin: StandinBase, registry: str = "127.0.0.1:5000", log: Log = print
) -> StandinBase:
    """Build (or reuse) ``m3-image/standin-base:vllm-4a560dd`` on ``standin`` and push it."""
    rec = load_reconstruction()
    check_registry(registry)
    repository = f"{registry}/{LOCAL_REPOSITORY}"
    fingerprint = _fingerprint(standin.image_id, rec)
    rels = sorted(rec.files)
    labels = labels_of(engine, LOCAL_TAG)
    if labels is not None and labels.get(FINGERPRINT_LABEL) == fingerprint:
        image_id = engine.image_id(LOCAL_TAG)
        assert image_id is not None  # labels_of found the tag
        log(f"standin: reusing {LOCAL_TAG} ({image_id[7:19]})")
    else:
        with tempfile.TemporaryDirectory(prefix="m3-standin-pinned-") as tmp:
            work = Path(tmp)
            pinned = reconstruct(read_blobs(engine, standin.reference, rels), work / "tree", rec)
            tree = work / "context" / "vllm"
            for rel, data in pinned.items():
                (tree / rel).parent.mkdir(parents=True, exist_ok=True)
                (tree / rel).write_bytes(data)
            dockerfile = render_template(
                TEMPLATE,
                parent=standin.reference,
                vllm_root=VLLM_ROOT,
                version=rec.version,
                commit=rec.commit,
                fingerprint_label=FINGERPRINT_LABEL,
                fingerprint=fingerprint,
            )
            with tempfile.TemporaryFile(dir=work) as context:
                write_context(context, dockerfile, {"vllm": tree})
                context.seek(0)
                log(
                    f"standin: building {LOCAL_TAG} (one layer: {len(pinned)} files of vLLM "
                    "4a560dd)"
                )
                image_id = engine.build(context, "Dockerfile", LOCAL_TAG, network_mode="none")
    # Whatever the engine holds under the tag, its bytes are checked before it is pushed.
    check_image(engine, image_id, rec, LOCAL_TAG)
    digest = push(engine, image_id, repository, TAG, log)
    return StandinBase(
        local_tag=LOCAL_TAG,
        repository=repository,
        digest=digest,
        reference=f"{repository}@{digest}",
        image_id=image_id,
        size=int(engine.inspect(image_id).get("Size") or 0),
    )
