"""Delivery: publish once, pull everywhere, never rebuild what exists, never run what was not validated.

* :func:`remote_image` asks the registry what a tag holds (manifest digest, config digest =
  image id, labels) from the manifest and config blob alone: no layer, no base pull.
* :func:`pull_if_published` is ``make image``'s first step: when the content tag already
  exists remotely and carries this very lock, pull it by digest (only the delta crosses the
  wire when the base is local), verify it against the lock, tag it; no build.
* :func:`check_reproduces` is ``--rebuild``'s last step: the image just built must have the
  registry copy's image id.
* :func:`publish` is ``make push``: the content tag first (docker SDK, errors inside the
  stream raise), checked against the registry, then each alias moved to exactly those
  manifest bytes in one request. Nothing moves an alias before the content tag is in place.
* :func:`cache_key` / :func:`pyxis_image`: what cluster jobs key on, derived from the digest.

Every error is one line naming the registry, repository and tag at fault; credentials come
from the docker config (docker-py's resolver, credential helpers included) and are never
printed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from builder.engine import Engine
from builder.errors import BuilderError, EngineError, RegistryError
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
    name: str                   # registry/repository, as the engine names it
    tag: str | None
    manifest_digest: str        # what the tag points to (what `repo@sha256:` pins)
    config_digest: str          # == the image id in a classic-store engine
    labels: dict[str, str]
    manifest: Manifest = field(repr=False)

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


def remote_image(reference: str, platform: str = "linux/amd64", *, verb: str = "look up") -> RemoteImage | None:
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
    return RemoteImage(name=ref.name, tag=ref.tag, manifest_digest=top.digest,
                       config_digest=manifest.body["config"]["digest"], labels=labels, manifest=top)


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
        raise TagConflict(f"{locked.reference}: the registry holds {remote.manifest_digest} under this content "
                          f"tag but its {LOCK_LABEL} label is {remote.lock_digest or 'missing'}, not {expected}; "
                          "refusing a foreign image under our tag")
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
    with log.step(f"pull {remote.pinned} instead of building"):
        image_id = engine.pull(remote.pinned, log.progress)
        if image_id != remote.config_digest:
            raise EngineError(f"pull {remote.pinned}: engine image id {image_id} differs from the registry's "
                              f"config digest {remote.config_digest}")
        log.info(f"pulled {remote.pinned}: image {image_id}")
    with log.step("verify the pulled image against the lock"):
        from builder.verify import require_verified
        require_verified(engine, image_id, locked.lock, what=remote.pinned)
    with log.step("tag"):
        for tag in (locked.tag, *target.aliases):
            engine.tag(image_id, target.repository, tag)
            log.info(f"tagged {target.repository}:{tag}")
    return image_id


def check_reproduces(locked, image_id: str, log) -> None:
    """After ``--rebuild``: the build must give the image id of the registry's copy, if any."""
    with log.step(f"compare with the registry's {locked.reference}"):
        remote = published_for(locked, log, verb="compare with")
        if remote is None:
            log.info("no registry copy to compare with")
            return
        if remote.config_digest != image_id:
            raise NotReproducible(f"{locked.reference}: rebuild is not reproducible: built image {image_id}, "
                                  f"the registry copy {remote.manifest_digest} is image {remote.config_digest}")
        log.info(f"reproduced the registry copy: image {image_id} == config of {remote.pinned}")


# -- make push ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Published:
    name: str
    tag: str
    manifest_digest: str
    image_id: str
    aliases: dict[str, tuple[str | None, str]]      # alias -> (digest before, digest now)

    @property
    def pinned(self) -> str:
        return f"{self.name}@{self.manifest_digest}"


def publish(engine: Engine, repository: str, tag: str, aliases: tuple[str, ...] | list[str], image_id: str,
            log, platform: str = "linux/amd64") -> Published:
    """Push ``repository:tag`` (which must be ``image_id`` locally), then point the aliases at it."""
    reference = f"{repository}:{tag}"
    local = engine.image_id(reference)
    if local != image_id:
        raise EngineError(f"push {reference}: the engine has {local or 'no such image'}, expected {image_id}")
    with log.step(f"ask the registry for {reference}"):
        existing = remote_image(reference, platform, verb="push")
        if existing is not None and existing.config_digest != image_id:
            raise TagConflict(f"push {reference}: the registry already holds this tag as {existing.manifest_digest} "
                              f"(image {existing.config_digest}), not image {image_id}; a content tag is never "
                              "overwritten")
        before = {}
        for alias in aliases:
            current = remote_image(f"{repository}:{alias}", platform, verb="push")
            before[alias] = current.manifest_digest if current else None
            log.info(f"{repository}:{alias} now {before[alias] or 'absent'}")
    with log.step(f"push {reference}"):
        digest = engine.push(repository, tag, log.progress)
        pushed = remote_image(reference, platform, verb="push")
        if pushed is None or pushed.manifest_digest != digest or pushed.config_digest != image_id:
            found = f"{pushed.manifest_digest} (image {pushed.config_digest})" if pushed else "nothing"
            raise RegistryError(f"push {reference}: the engine reported {digest} for image {image_id}, "
                                f"the registry holds {found}")
        log.info(f"pushed {reference} -> {digest}")
    moved: dict[str, tuple[str | None, str]] = {}
    if aliases:
        ref = parse_reference(reference)
        with log.step(f"point {len(aliases)} alias(es) at {digest}"):
            client, _ = client_for(reference)
            for alias in aliases:
                try:
                    client.put_manifest(ref.repository, alias, pushed.manifest.raw, pushed.manifest.media_type)
                except RegistryError as exc:
                    raise _at("push", f"{repository}:{alias}", exc) from None
                moved[alias] = (before[alias], digest)
                log.info(f"{repository}:{alias} -> {digest} (was {before[alias] or 'absent'})")
    return Published(name=pushed.name, tag=tag, manifest_digest=digest, image_id=image_id, aliases=moved)


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
