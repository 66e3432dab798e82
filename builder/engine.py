"""The container engine, through docker-py's Docker API: the only module that talks to one.

Docker (classic or containerd image store) and Podman (its Docker-compatible API) alike.
Everything the builder needs from an engine is here: pull by digest, find an image whatever
the store names it, read files out of an image through the archive API (never an export of
the whole image), load an assembled image, tag, run, remove; build and push for the stand-in.

Every engine error becomes one line in one place (:meth:`Engine._call`): API errors, errors
that docker-py reports inside a progress stream (it does not raise them), lost connections,
and APIs an engine does not provide (named with the engine, its version and image store).
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import docker
import requests
from docker import errors as docker_errors

from builder.errors import EngineError

ProgressFn = Callable[[str], None]


_UNAUTHORIZED = (
    "unauthorized",
    "authentication required",
    "no basic auth credentials",
    "denied: requested access",
)
_UNREACHABLE = re.compile(
    r"connection refused|connection reset|broken pipe|i/o timeout|no such host|"
    r"server misbehaving|\bEOF\b|502 bad gateway|503 service unavailable",
    re.I,
)


def _friendly(message: str) -> str:
    lowered = message.lower()
    if "no space left on device" in lowered:
        return (
            f"the engine ran out of disk space ({message.strip()}); free space with `docker "
            "system prune`"
        )
    short = re.sub(r"\?[^\s\"]*", "", message.strip())  # upload URLs carry long state tokens
    if any(word in lowered for word in _UNAUTHORIZED):
        return (
            f"the registry refused the credentials ({short}); check `docker login` / the docker "
            "config ($DOCKER_CONFIG/config.json, credential helpers)"
        )
    if _UNREACHABLE.search(message):
        return f"the registry is unreachable or went away mid-transfer ({short})"
    return message.strip()


def check_stream(
    chunks: Iterable[dict], what: str, progress: ProgressFn | None = None
) -> list[dict]:
    """Consume a JSON progress stream; raise on the first ``error`` entry it carries."""
    seen = []
    last_status: dict[str, str] = {}
    for chunk in chunks:
        seen.append(chunk)
        if "error" in chunk or "errorDetail" in chunk:
            detail = (
                chunk.get("errorDetail", {}).get("message") or chunk.get("error") or "unknown error"
            )
            raise EngineError(f"{what}: {_friendly(detail)}")
        if progress is None:
            continue
        if "stream" in chunk and chunk["stream"].strip():
            progress(chunk["stream"].rstrip())
        elif "status" in chunk:
            key = chunk.get("id", "")
            status = chunk["status"]
            if last_status.get(key) != status:  # one line per layer state, not per byte
                last_status[key] = status
                progress(f"{key}: {status}" if key else status)
    return seen


@dataclass(frozen=True)
class FileEntry:
    data: bytes
    mode: int


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    output: str  # stdout and stderr, interleaved
    files: dict[str, bytes]  # the collected files that existed


@dataclass(frozen=True)
class EngineInfo:
    name: str  # "Docker Engine", "Podman Engine"
    version: str
    store: str  # "classic image store (overlay2)", "containerd image store (overlayfs)", ...

    @property
    def podman(self) -> bool:
        return "podman" in self.name.lower()

    def __str__(self) -> str:
        return f"{self.name} {self.version} ({self.store})"


def engine_info(version: dict, info: dict) -> EngineInfo:
    """Name, version and image store from ``GET /version`` and ``GET /info``."""
    components = {c.get("Name", ""): c.get("Version", "") for c in version.get("Components") or []}
    podman = next((n for n in components if "podman" in n.lower()), None)
    name = podman or "Docker Engine"
    number = components.get(podman or "Engine") or version.get("Version") or "unknown version"
    driver = info.get("Driver") or "unknown driver"
    status = dict(tuple(item) for item in info.get("DriverStatus") or [] if len(item) == 2)
    if podman:
        store = f"containers/storage ({driver})"
    elif "containerd.snapshotter" in status.get("driver-type", ""):
        store = f"containerd image store ({driver})"
    else:
        store = f"classic image store ({driver})"
    return EngineInfo(name=name, version=number, store=store)


_GLOB = re.compile(r"([\\\[\]*?])")


def archive_path(path: str, info: EngineInfo) -> str:
    """The path as the engine's archive API wants it: Podman treats it as a glob pattern
    (``block_shape=[128,128].json`` would match nothing), so escape its metacharacters."""
    return _GLOB.sub(r"\\\1", path) if info.podman else path


_UNSUPPORTED = re.compile(r"page not found|not implemented|unknown api|no such api", re.I)


class Engine:
    def __init__(self, client: docker.DockerClient, info: EngineInfo | None = None):
        self.client = client
        self.api = client.api
        self._info = info

    @classmethod
    def connect(cls) -> Engine:
        try:
            client = docker.from_env(timeout=600)
            client.ping()
        except (docker_errors.DockerException, requests.RequestException) as exc:
            reason = str(exc).split("(", 1)[0].strip() or type(exc).__name__
            raise EngineError(
                f"cannot reach the Docker engine ({reason}): is dockerd running and "
                "DOCKER_HOST set correctly?"
            ) from None
        engine = cls(client)
        _ = engine.info  # one line now, rather than mid-build, if /version or /info fail
        return engine

    @property
    def info(self) -> EngineInfo:
        if self._info is None:
            self._info = EngineInfo("engine", "of unknown version", "unknown image store")
            self._info = self._call(
                "ask the engine what it is",
                lambda: engine_info(self.api.version(), self.api.info()),
            )
        return self._info

    def describe(self) -> str:
        return str(self.info)

    # -- the one place engine errors are mapped -------------------------------------------------
    def _explain(self, exc: Exception) -> str:
        if isinstance(exc, docker_errors.APIError):
            message = exc.explanation or str(exc)
            if isinstance(message, bytes):
                message = message.decode("utf-8", "replace")
            status = exc.status_code
            if status in (405, 501) or (status == 404 and _UNSUPPORTED.search(str(message))):
                return (
                    f"{self.describe()} does not provide this API ({str(message).strip()}); the "
                    "builder needs "
                    "the Docker engine API's archive, load, create/start/wait and tag endpoints"
                )
            return _friendly(str(message))
        if isinstance(exc, requests.RequestException):
            return (
                f"the engine connection failed ({type(exc).__name__}: "
                f"{str(exc).split('(', 1)[0].strip()})"
            )
        return _friendly(str(exc)) or type(exc).__name__

    @contextmanager
    def _mapped(self, what: str) -> Iterator[None]:
        try:
            yield
        except EngineError:
            raise
        except (docker_errors.DockerException, requests.RequestException) as exc:
            raise EngineError(f"{what}: {self._explain(exc)}") from None

    def _call(self, what: str, fn: Callable, absent=Ellipsis):
        """``fn()`` with every engine error as one :class:`EngineError` line; ``absent`` is
        returned instead when the engine says the object does not exist (404)."""
        with self._mapped(what):
            try:
                return fn()
            except docker_errors.NotFound as exc:
                if absent is not Ellipsis and not _UNSUPPORTED.search(str(exc.explanation or "")):
                    return absent
                raise

    # -- images ---------------------------------------------------------------------------
    def image_id(self, ref: str) -> str | None:
        return self._call(f"inspect {ref}", lambda: self.api.inspect_image(ref)["Id"], absent=None)

    def inspect(self, ref: str) -> dict:
        found = self._call(f"inspect {ref}", lambda: self.api.inspect_image(ref), absent=None)
        if found is None:
            raise EngineError(f"{ref}: no such image in the engine")
        return found

    def find_image(
        self, names: list[str], diff_ids: list[str], *, config_digest: str
    ) -> str | None:
        """The engine's id for an image known by its digests, whatever the store calls it.

        Classic stores and Podman key images by config digest, the containerd store by manifest
        (or index) digest; so each name is tried and an answer is accepted only when its id is
        one of the digests we know and its layers are exactly ``diff_ids``.
        """
        digests = {config_digest} | {n for n in names if n.startswith("sha256:")}
        for name in names:
            found = self._call(
                f"inspect {name}", lambda name=name: self.api.inspect_image(name), absent=None
            )
            if found is None:
                continue
            image_id = found.get("Id", "")
            if not image_id.startswith("sha256:"):
                image_id = "sha256:" + image_id
            if (
                image_id in digests
                and list((found.get("RootFS") or {}).get("Layers") or []) == diff_ids
            ):
                return image_id
        return None

    def pull(self, reference: str, progress: ProgressFn | None = None) -> str:
        """Pull ``name@sha256:...`` (or name:tag); returns the local image id."""
        name, sep, digest = reference.partition("@")
        self._call(
            f"pull {reference}",
            lambda: check_stream(
                self.api.pull(name, tag=digest if sep else None, stream=True, decode=True),
                f"pull {reference}",
                progress,
            ),
        )
        image_id = self.image_id(reference)
        if image_id is None:
            raise EngineError(f"pull {reference}: the engine reports success but has no such image")
        return image_id

    def ensure(self, reference: str, progress: ProgressFn | None = None) -> str:
        return self.image_id(reference) or self.pull(reference, progress)

    def tag(self, image: str, repository: str, tag: str) -> None:
        self._call(
            f"tag {repository}:{tag}", lambda: self.api.tag(image, repository, tag, force=True)
        )

    def untag(self, ref: str) -> None:
        self._call(f"untag {ref}", lambda: self.api.remove_image(ref, noprune=True), absent=None)

    def remove(self, ref: str) -> None:
        self._call(f"remove {ref}", lambda: self.api.remove_image(ref, force=True), absent=None)

    def names_of(self, image: str) -> list[str]:
        """The tags an image carries (empty when it has none or is absent)."""
        found = (
            self._call(f"inspect {image}", lambda: self.api.inspect_image(image), absent=None) or {}
        )
        return [t for t in found.get("RepoTags") or [] if t and not t.startswith("<none>")]

    # -- files out of an image --------------------------------------------------------------
    def read_files(self, image: str, paths: list[str]) -> dict[str, FileEntry | None]:
        """Read regular files out of ``image`` with the archive API; None for absent paths.

        Only the requested files cross the wire, whatever the image's size. Symlinks and
        anything but regular files are refused: the patch stack never follows links.
        """
        container = self._create(image)
        try:
            found: dict[str, FileEntry | None] = {}
            for path in paths:
                found[path] = self._read_file(container, path, image)
            return found
        finally:
            self.remove_container(container)

    def _read_file(self, container: str, path: str, image: str) -> FileEntry | None:
        wanted = archive_path(path, self.info)
        got = self._call(
            f"read {path} from {image}",
            lambda: b"".join(self.api.get_archive(container, wanted)[0]),
            absent=None,
        )
        if got is None:
            return None
        with tarfile.open(fileobj=io.BytesIO(got)) as archive:
            member = archive.next()
            if member is None or not member.isfile():
                kind = (
                    "a symlink" if member is not None and member.issym() else "not a regular file"
                )
                raise EngineError(f"{image}: {path} is {kind}; refusing to read it")
            data = archive.extractfile(member)
            assert data is not None  # a regular file (checked above) always has data
            return FileEntry(data=data.read(), mode=member.mode & 0o7777)

    def run(
        self,
        image: str,
        command: list[str],
        *,
        collect: list[str],
        timeout_s: int,
        environment: dict[str, str] | None = None,
        **host_options,
    ) -> RunResult:
        """Run ``command`` in a fresh container (no network), wait, and read ``collect`` files
        out of it with the archive API. The container is removed on every exit path (an error,
        a timeout, SIGTERM or Ctrl-C included)."""
        what = f"run {image}"
        container = self._create(
            image,
            command=command,
            environment=environment or {},
            network_disabled=True,
            host_config=self._call(what, lambda: self.api.create_host_config(**host_options)),
        )
        try:
            self._call(f"{what}: start container", lambda: self.api.start(container))
            try:
                status = self.api.wait(container, timeout=timeout_s)
            except requests.RequestException as exc:  # ReadTimeout / ConnectionError
                raise EngineError(
                    f"{what}: did not finish within {timeout_s}s ({type(exc).__name__})"
                ) from None
            except docker_errors.DockerException as exc:
                raise EngineError(f"{what}: wait: {self._explain(exc)}") from None
            output = self._call(
                f"{what}: logs", lambda: self.api.logs(container, stdout=True, stderr=True)
            )
            output = output.decode("utf-8", "replace")
            files = {path: self._read_file(container, path, image) for path in collect}
            return RunResult(
                exit_code=int(status.get("StatusCode", -1)),
                output=output,
                files={k: v.data for k, v in files.items() if v is not None},
            )
        finally:
            self.remove_container(container)

    def _create(self, image: str, command: list[str] | None = None, **kwargs) -> str:
        created = self._call(
            f"create container from {image}",
            lambda: self.api.create_container(
                image, command=command or ["/m3-image-never-started"], **kwargs
            ),
            absent=None,
        )
        if created is None:
            raise EngineError(f"{image}: no such image in the engine")
        return created["Id"]

    def remove_container(self, container: str) -> None:
        """Remove (killing it if it runs); never raises: it runs in cleanup paths."""
        try:
            self.api.remove_container(container, force=True)
        except (docker_errors.DockerException, requests.RequestException):
            pass

    # -- build, save, load ----------------------------------------------------------------
    def build(
        self,
        context: Path | BinaryIO,
        dockerfile: str,
        tag: str,
        progress: ProgressFn | None = None,
        network_mode: str | None = None,
    ) -> str:
        """Build with the engine's builder from a folder or an uncompressed tar stream (the
        stand-in base and the Dockerfile-agreement test; the product's layer is written by
        builder.layer)."""
        source = (
            {"path": str(context)}
            if isinstance(context, (str, Path))
            else {"fileobj": context, "custom_context": True}
        )
        self._call(
            f"build {tag}",
            lambda: check_stream(
                self.api.build(
                    **source,
                    dockerfile=dockerfile,
                    tag=tag,
                    rm=True,
                    forcerm=True,
                    pull=False,
                    decode=True,
                    network_mode=network_mode,
                ),
                f"build {tag}",
                progress,
            ),
        )
        return self.inspect(tag)["Id"]

    def import_image(self, tar_path: Path, repository: str, tag: str) -> str:
        """``docker import`` a root filesystem tar as ``repository:tag``; returns the image id."""
        reference = f"{repository}:{tag}"
        try:
            raw = self.api.import_image_from_file(str(tar_path), repository=repository, tag=tag)
            lines = [line for line in str(raw).splitlines() if line.strip().startswith("{")]
            check_stream((json.loads(line) for line in lines), f"import {tar_path} as {reference}")
        except docker_errors.APIError as exc:
            raise EngineError(
                f"import {tar_path} as {reference}: {_friendly(exc.explanation or str(exc))}"
            ) from None
        image_id = self.image_id(reference)
        if image_id is None:
            raise EngineError(
                f"import {tar_path} as {reference}: the engine reports success but has no such "
                "image"
            )
        return image_id

    def save(self, image: str) -> bytes:
        """``docker save`` of a *small* image, held in memory."""
        return self._call(f"save {image}", lambda: b"".join(self.api.get_image(image)))

    def load(self, archive: bytes) -> None:
        def load() -> None:
            result = self.api.load_image(archive)
            check_stream(
                result if not isinstance(result, dict) else [result], "load assembled image"
            )

        self._call("load assembled image", load)

    # -- registry --------------------------------------------------------------------------
    def push(self, repository: str, tag: str, progress: ProgressFn | None = None) -> str:
        """Push ``repository:tag`` with the engine (the stand-in base); returns the manifest
        digest."""
        chunks = self._call(
            f"push {repository}:{tag}",
            lambda: check_stream(
                self.api.push(repository, tag=tag, stream=True, decode=True),
                f"push {repository}:{tag}",
                progress,
            ),
        )
        for chunk in chunks:
            digest = chunk.get("aux", {}).get("Digest")
            if digest:
                return digest
        raise EngineError(f"push {repository}:{tag}: the engine reported no manifest digest")
