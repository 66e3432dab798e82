"""Delivery: publish once, pull everywhere, never rebuild what exists, never run what was not
validated.

* :func:`remote_image` asks the registry what a tag holds (manifest digest, config digest =
  image id, labels) from the manifest and config blob alone: no layer, no base pull.
* :func:`pull_if_published` is ``make image``'s first step: when the content tag already
  exists remotely and carries this very lock, pull it by digest (only the delta crosses the
  wire when the base is local), verify it against the lock, tag it; no build.
* :func:`check_reproduces` is ``--rebuild``'s last step: the image just built must have the
  registry copy's config and manifest digests.
* :func:`publish` is ``make push``: the builder's own manifest, through the registry API (no
  engine push, so no engine's gzip decides the digest): base layer blobs skipped when present,
  mounted across repositories of the same registry, else streamed from the base's registry;
  the delta and config blobs; the manifest under the content tag; then each alias moved to
  exactly those manifest bytes in one request. A content tag that already holds these bytes
  is a no-op (a second engine's push of the same lock); one holding anything else is never
  overwritten. Nothing moves an alias before the content tag is in place.
* :func:`expected_manifest`: the manifest the lock predicts for a registry copy (resolve).
* :func:`cache_key` / :func:`pyxis_image`: what cluster jobs key on, derived from the digest.

Every error is one line naming the registry, repository and tag at fault; credentials come
from the docker config (docker-py's resolver, credential helpers included) and are never
printed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from builder.assemble import OCI_MANIFEST, BuiltImage, image_manifest
from builder.base import ResolvedBase
from builder.engine import Engine
from builder.errors import BuilderError, EngineError, RegistryError
from builder.hashing import sha256_bytes
from builder.lock import content_digest
from builder.provenance import NS
from builder.registry import DOCKER_HUB, INDEX_TYPES, Manifest, client_for, parse_reference

LOCK_LABEL = f"{NS}.lock.sha256"
TAG_LABEL = f"{NS}.content-tag"


class NotReproducible(BuilderError):
    """A rebuild did not reproduce the image the registry holds under the same content tag."""


class TagConflict(RegistryError):
    """The registry holds something else under a content tag: it is never overwritten."""


@dataclass(frozen=True)
class RemoteImage:
    name: str  # registry/repository, as the engine names it
    tag: str | None
    manifest_digest: str  # what the tag points to (what `repo@sha256:` pins)
    config_digest: str  # == the image id in a classic-store engine and Podman
    labels: dict[str, str]
    manifest: Manifest = field(repr=False)  # what the tag points to (manifest or index)
    image_manifest: Manifest | None = field(default=None, repr=False)  # the platform's manifest
    raw_config: bytes = field(default=b"{}", repr=False)

    @property
    def diff_ids(self) -> list[str]:
        return list(json.loads(self.raw_config).get("rootfs", {}).get("diff_ids") or [])

    @property
    def pinned(self) -> str:
        return f"{self.name}@{self.manifest_digest}"

    @property
    def lock_digest(self) -> str | None:
        return self.labels.get(LOCK_LABEL)


def _at(verb: str, reference: str, exc: BuilderError) -> RegistryError:
    """Re-state a registry client error as ``<verb> <registry>/<repository>:<tag>: <reason>``."""
    message = str(exc)
    registry = parse_reference(reference).registry
    if message.startswith(registry) and ": " in message:
        message = message.split(": ", 1)[1]
    return RegistryError(f"{verb} {reference}: {message}")


def remote_image(
    reference: str, platform: str = "linux/amd64", *, verb: str = "look up"
) -> RemoteImage | None:
    """What ``reference`` (name:tag or name@digest) holds in its registry; None when absent."""
    ref = parse_reference(reference)
    try:
        client, _ = client_for(reference)
        top = client.get_manifest(ref.repository, ref.digest or ref.tag or "latest")
        if top is None:
            return None
        manifest, raw_config = client.resolve_image(ref.repository, top.digest, platform)
    except RegistryError as exc:
        raise _at(verb, reference, exc) from None
    config = json.loads(raw_config)
    labels = (config.get("config") or {}).get("Labels") or {}
    return RemoteImage(
        name=ref.name,
        tag=ref.tag,
        manifest_digest=top.digest,
        config_digest=manifest.body["config"]["digest"],
        labels=labels,
        manifest=top,
        image_manifest=manifest,
        raw_config=raw_config,
    )


# -- make image: ask the registry first --------------------------------------------------------
def published_for(locked, log, *, verb: str = "look up") -> RemoteImage | None:
    """The registry's copy of the content tag if it carries this lock; refuse a foreign one.

    An unreachable registry or refused credentials are not fatal here: the caller builds.
    """
    try:
        remote = remote_image(locked.reference, locked.inputs.target.base.platform, verb=verb)
    except RegistryError as exc:
        log.info(f"cannot ask the registry ({exc})")
        return None
    if remote is None:
        return None
    expected = content_digest(locked.lock)
    if remote.lock_digest != expected:
        raise TagConflict(
            f"{locked.reference}: the registry holds {remote.manifest_digest} under this content "
            f"tag but its {LOCK_LABEL} label is {remote.lock_digest or 'missing'}, not {expected}; "
            "refusing a foreign image under our tag"
        )
    return remote


def pull_if_published(engine: Engine, locked, log) -> str | None:
    """Pull, verify and tag the registry's copy of the content tag; None when there is none."""
    target = locked.inputs.target
    with log.step(f"ask the registry for {locked.reference}"):
        remote = published_for(locked, log)
        if remote is None:
            log.info("not published (or registry not reachable): building")
            return None
        log.info(f"published as {remote.pinned} (image {remote.config_digest})")
    from builder.verify import require_verified
    from builder.workflow import removed_unless_released

    def find() -> str | None:
        return engine.find_image(
            [remote.config_digest, remote.manifest_digest],
            remote.diff_ids,
            config_digest=remote.config_digest,
        )

    preexisting = find() is not None
    with log.step(f"pull {remote.pinned} instead of building"):
        engine.pull(remote.pinned, log.progress)
        image_id = find()
        if image_id is None:
            raise EngineError(
                f"pull {remote.pinned}: {engine.describe()} holds no image with the registry's "
                f"config {remote.config_digest} and its layers"
            )
        log.info(f"pulled {remote.pinned}: image {image_id}")
    with removed_unless_released(
        engine, image_id, preexisting, log
    ):  # a refused pull leaves nothing
        with log.step("verify the pulled image against the lock"):
            require_verified(engine, image_id, locked.lock, what=remote.pinned)
        with log.step("tag"):
            for tag in (locked.tag, *target.aliases):
                engine.tag(image_id, target.repository, tag)
                log.info(f"tagged {target.repository}:{tag}")
    return image_id


def check_reproduces(locked, image: BuiltImage, log) -> None:
    """After ``--rebuild``: the build must give the registry copy's config and manifest, if any."""
    with log.step(f"compare with the registry's {locked.reference}"):
        remote = published_for(locked, log, verb="compare with")
        if remote is None:
            log.info("no registry copy to compare with")
            return
        if (remote.config_digest, remote.manifest_digest) != (
            image.config_digest,
            image.manifest_digest,
        ):
            raise NotReproducible(
                f"{locked.reference}: rebuild is not reproducible: built config "
                f"{image.config_digest} "
                f"manifest {image.manifest_digest}, the registry copy is config "
                f"{remote.config_digest} manifest {remote.manifest_digest}"
            )
        log.info(
            f"reproduced the registry copy: image {image.config_digest} == config of "
            f"{remote.pinned} (and its manifest digest)"
        )


# -- make push ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Published:
    name: str
    tag: str
    manifest_digest: str
    image_id: str  # the config digest
    aliases: dict[str, tuple[str | None, str]]  # alias -> (digest before, digest now)
    uploaded: int = 0  # bytes sent to the registry (blobs and manifest)
    blobs: dict[str, str] = field(
        default_factory=dict
    )  # digest -> present | mounted | uploaded | streamed
    no_op: bool = False  # the content tag already held these very bytes

    @property
    def pinned(self) -> str:
        return f"{self.name}@{self.manifest_digest}"


def _upload_blobs(
    client, repository: str, image: BuiltImage, base: ResolvedBase, log
) -> tuple[int, dict[str, str]]:
    """Every blob the manifest names, into ``repository``: present ones skipped, base layers
    mounted (same registry) or streamed from the base's registry, delta and config from memory."""
    sent, how = 0, {}
    base_client, base_ref = client_for(base.image.reference)
    same_registry = base_ref.registry == client.registry
    for layer in json.loads(image.manifest)["layers"][:-1]:
        digest = layer["digest"]
        if client.has_blob(repository, digest):
            how[digest] = "present"
        elif same_registry and client.mount_blob(repository, digest, base_ref.repository):
            how[digest] = "mounted"
        else:
            client.put_blob(
                repository, digest, base_client.blob_chunks(base_ref.repository, digest)
            )
            sent += int(layer["size"])
            how[digest] = "streamed"
        log.info(f"base layer {digest[:19]}: {how[digest]}")
    for what, digest, data in (
        ("delta layer", image.delta.diff_id, image.delta.layer),
        ("config", image.config_digest, image.config),
    ):
        if client.has_blob(repository, digest):
            how[digest] = "present"
        else:
            client.put_blob(repository, digest, data)
            sent += len(data)
            how[digest] = "uploaded"
        log.info(f"{what} {digest[:19]}: {how[digest]} ({len(data)} bytes)")
    return sent, how


def publish(
    repository: str,
    tag: str,
    aliases: tuple[str, ...] | list[str],
    image: BuiltImage,
    base: ResolvedBase,
    log,
    platform: str = "linux/amd64",
) -> Published:
    """Push the builder's own image under ``repository:tag`` through the registry API, then point
    the aliases at it. The manifest digest is the builder's, the same from every machine."""
    reference = f"{repository}:{tag}"
    ref = parse_reference(reference)
    with log.step(f"ask the registry for {reference}"):
        existing = remote_image(reference, platform, verb="push")
        if existing is not None and existing.manifest_digest != image.manifest_digest:
            wanted = (
                f"image {image.config_digest}"
                if existing.config_digest != image.config_digest
                else f"the builder's manifest {image.manifest_digest} of that image (pushed by "
                "another tool?)"
            )
            raise TagConflict(
                f"push {reference}: the registry already holds this tag as "
                f"{existing.manifest_digest} "
                f"(image {existing.config_digest}), not {wanted}; a content tag is never "
                "overwritten"
            )
        before: dict[str, str | None] = {}
        for alias in aliases:
            current = remote_image(f"{repository}:{alias}", platform, verb="push")
            before[alias] = current.manifest_digest if current else None
            log.info(f"{repository}:{alias} now {before[alias] or 'absent'}")
    client, _ = client_for(reference)
    how: dict[str, str] = {}
    sent, no_op = 0, existing is not None
    if no_op:
        log.info(f"{reference} already holds manifest {image.manifest_digest}: nothing to push")
    else:
        with log.step(f"push {reference} (the builder's manifest, through the registry API)"):
            try:
                sent, how = _upload_blobs(client, ref.repository, image, base, log)
                client.put_manifest(ref.repository, tag, image.manifest, OCI_MANIFEST)
            except RegistryError as exc:
                raise _at("push", reference, exc) from None
            sent += len(image.manifest)
            pushed = remote_image(reference, platform, verb="push")
            if pushed is None or pushed.manifest_digest != image.manifest_digest:
                raise RegistryError(
                    f"push {reference}: sent manifest {image.manifest_digest}, the registry holds "
                    f"{pushed.manifest_digest if pushed else 'nothing'}"
                )
            log.info(f"pushed {reference} -> {image.manifest_digest} ({sent} bytes sent)")
    digest = image.manifest_digest
    moved: dict[str, tuple[str | None, str]] = {}
    if aliases:
        with log.step(f"point {len(aliases)} alias(es) at {digest}"):
            for alias in aliases:
                try:
                    client.put_manifest(ref.repository, alias, image.manifest, OCI_MANIFEST)
                except RegistryError as exc:
                    raise _at("push", f"{repository}:{alias}", exc) from None
                moved[alias] = (before[alias], digest)
                log.info(f"{repository}:{alias} -> {digest} (was {before[alias] or 'absent'})")
    return Published(
        name=ref.name,
        tag=tag,
        manifest_digest=digest,
        image_id=image.config_digest,
        aliases=moved,
        uploaded=sent,
        blobs=how,
        no_op=no_op,
    )


def expected_manifest(remote: RemoteImage, base: ResolvedBase) -> bytes | None:
    """The manifest the lock predicts for ``remote``: the builder's canonical manifest of the
    registry's config on the locked base, with the delta layer as the registry lists it; None
    when the registry copy is not a single-platform manifest with one layer on the base's."""
    if remote.image_manifest is None or remote.image_manifest.digest != remote.manifest_digest:
        return None
    layers = remote.image_manifest.body.get("layers") or []
    if not layers:
        return None
    last = layers[-1]
    return image_manifest(remote.raw_config, base, last.get("digest", ""), int(last.get("size", 0)))


# -- resolve: what a cluster job needs ------------------------------------------------------------
def cache_key(name: str, manifest_digest: str) -> str:
    """A file-name-safe key for node caches (enroot squashfs, ...): from the digest, never a tag."""
    algorithm, _, hexdigest = manifest_digest.partition(":")
    if algorithm != "sha256" or len(hexdigest) != 64:
        raise RegistryError(f"{name}: not a sha256 manifest digest: {manifest_digest!r}")
    repository = parse_reference(name).repository.rsplit("/", 1)[-1]
    return f"{repository}+sha256-{hexdigest}"


def pyxis_image(name: str, manifest_digest: str) -> str:
    """The enroot/Pyxis form ``registry#repository@sha256:...`` (``--container-image=`` value)."""
    ref = parse_reference(name)
    repository = ref.repository
    if ref.registry == DOCKER_HUB:
        return f"{repository}@{manifest_digest}"
    return f"{ref.registry}#{repository}@{manifest_digest}"


def is_index(remote: RemoteImage) -> bool:
    return remote.manifest.media_type in INDEX_TYPES


def published_as_predicted(locked, *, verb: str) -> RemoteImage:
    """The registry's copy of the lock's content tag, accepted only when it carries this lock and
    its manifest is exactly the one the builder computes for that lock on its base (so a copy
    pushed by an engine, with the engine's compression, is told apart). One line otherwise."""
    reference = locked.reference
    remote = remote_image(reference, locked.inputs.target.base.platform, verb=verb)
    if remote is None:
        raise RegistryError(
            f"{verb} {reference}: no such tag in the registry; push it first (`make push`)"
        )
    expected_lock = content_digest(locked.lock)
    if remote.lock_digest != expected_lock:
        raise RegistryError(
            f"{verb} {reference}: the registry's image carries {LOCK_LABEL}="
            f"{remote.lock_digest or 'nothing'}, not this lock's {expected_lock}; refusing it"
        )
    from builder.base import resolve_base

    try:
        expected = expected_manifest(remote, resolve_base(locked.inputs.target.base))
    except BuilderError as exc:
        raise RegistryError(f"{verb} {reference}: {exc}") from None
    predicted = "sha256:" + sha256_bytes(expected) if expected is not None else None
    if predicted != remote.manifest_digest:
        raise RegistryError(
            f"{verb} {reference}: the registry holds manifest {remote.manifest_digest}, the lock "
            f"predicts {predicted or 'a single-platform manifest'}; not the builder's push, "
            "refusing it"
        )
    return remote
