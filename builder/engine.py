"""The Docker engine, through docker-py: the only module that talks to dockerd.

Everything the builder needs from an engine is here: pull by digest, read files out of an
image through the archive API (never an export of the whole image), build a small
Dockerfile, save a small image, load an assembled one, tag, push, run. Errors that docker-py
reports inside a progress stream (it does not raise them) are turned into exceptions here.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterable

import docker
from docker import errors as docker_errors

from builder.errors import EngineError

ProgressFn = Callable[[str], None]


_UNAUTHORIZED = ("unauthorized", "authentication required", "no basic auth credentials", "denied: requested access")
_UNREACHABLE = re.compile(r"connection refused|connection reset|broken pipe|i/o timeout|no such host|"
                          r"server misbehaving|\bEOF\b|502 bad gateway|503 service unavailable", re.I)


def _friendly(message: str) -> str:
    lowered = message.lower()
    if "no space left on device" in lowered:
        return f"the engine ran out of disk space ({message.strip()}); free space with `docker system prune`"
    short = re.sub(r"\?[^\s\"]*", "", message.strip())      # upload URLs carry long state tokens
    if any(word in lowered for word in _UNAUTHORIZED):
        return (f"the registry refused the credentials ({short}); check `docker login` / the docker config "
                "($DOCKER_CONFIG/config.json, credential helpers)")
    if _UNREACHABLE.search(message):
        return f"the registry is unreachable or went away mid-transfer ({short})"
    return message.strip()


def check_stream(chunks: Iterable[dict], what: str, progress: ProgressFn | None = None) -> list[dict]:
    """Consume a JSON progress stream; raise on the first ``error`` entry it carries."""
    seen = []
    last_status: dict[str, str] = {}
    for chunk in chunks:
        seen.append(chunk)
        if "error" in chunk or "errorDetail" in chunk:
            detail = chunk.get("errorDetail", {}).get("message") or chunk.get("error") or "unknown error"
            raise EngineError(f"{what}: {_friendly(detail)}")
        if progress is None:
            continue
        if "stream" in chunk and chunk["stream"].strip():
            progress(chunk["stream"].rstrip())
        elif "status" in chunk:
            key = chunk.get("id", "")
            status = chunk["status"]
            if last_status.get(key) != status:      # one line per layer state, not per byte
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
    output: str                 # stdout and stderr, interleaved
    files: dict[str, bytes]     # the collected files that existed


class Engine:
    def __init__(self, client: docker.DockerClient):
        self.client = client
        self.api = client.api

    @classmethod
    def connect(cls) -> "Engine":
        try:
            client = docker.from_env(timeout=600)
            client.ping()
        except docker_errors.DockerException as exc:
            reason = str(exc).split("(", 1)[0].strip() or type(exc).__name__
            raise EngineError(f"cannot reach the Docker engine ({reason}): is dockerd running and "
                              "DOCKER_HOST set correctly?") from None
        return cls(client)

    # -- images ---------------------------------------------------------------------------
    def image_id(self, ref: str) -> str | None:
        try:
            return self.api.inspect_image(ref)["Id"]
        except docker_errors.ImageNotFound:
            return None
        except docker_errors.APIError as exc:
            raise EngineError(f"inspect {ref}: {_friendly(exc.explanation or str(exc))}") from None

    def inspect(self, ref: str) -> dict:
        try:
            return self.api.inspect_image(ref)
        except docker_errors.ImageNotFound:
            raise EngineError(f"{ref}: no such image in the engine") from None

    def pull(self, reference: str, progress: ProgressFn | None = None) -> str:
        """Pull ``name@sha256:...`` (or name:tag); returns the local image id."""
        name, sep, digest = reference.partition("@")
        try:
            stream = self.api.pull(name, tag=digest if sep else None, stream=True, decode=True)
            check_stream(stream, f"pull {reference}", progress)
        except docker_errors.APIError as exc:
            raise EngineError(f"pull {reference}: {_friendly(exc.explanation or str(exc))}") from None
        image_id = self.image_id(reference)
        if image_id is None:
            raise EngineError(f"pull {reference}: the engine reports success but has no such image")
        return image_id

    def ensure(self, reference: str, progress: ProgressFn | None = None) -> str:
        return self.image_id(reference) or self.pull(reference, progress)

    def tag(self, image: str, repository: str, tag: str) -> None:
        try:
            self.api.tag(image, repository, tag, force=True)
        except docker_errors.APIError as exc:
            raise EngineError(f"tag {repository}:{tag}: {_friendly(exc.explanation or str(exc))}") from None

    def untag(self, ref: str) -> None:
        try:
            self.api.remove_image(ref, noprune=True)
        except docker_errors.ImageNotFound:
            pass

    def remove(self, ref: str) -> None:
        try:
            self.api.remove_image(ref, force=True)
        except docker_errors.ImageNotFound:
            pass

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
            self.api.remove_container(container, force=True)

    def _read_file(self, container: str, path: str, image: str) -> FileEntry | None:
        try:
            stream, _stat = self.api.get_archive(container, path)
        except docker_errors.NotFound:
            return None
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
            member = archive.next()
            if member is None or not member.isfile():
                kind = "a symlink" if member is not None and member.issym() else "not a regular file"
                raise EngineError(f"{image}: {path} is {kind}; refusing to read it")
            return FileEntry(data=archive.extractfile(member).read(), mode=member.mode)

    def run(self, image: str, command: list[str], *, collect: list[str], timeout_s: int,
            environment: dict[str, str] | None = None, **host_options) -> RunResult:
        """Run ``command`` in a fresh container (no network), wait, and read ``collect`` files
        out of it with the archive API; the container is always removed."""
        try:
            container = self.api.create_container(
                image, command=command, environment=environment or {}, network_disabled=True,
                host_config=self.api.create_host_config(**host_options))["Id"]
        except docker_errors.ImageNotFound:
            raise EngineError(f"{image}: no such image in the engine") from None
        except docker_errors.APIError as exc:
            raise EngineError(f"run {image}: {_friendly(exc.explanation or str(exc))}") from None
        try:
            self.api.start(container)
            try:
                status = self.api.wait(container, timeout=timeout_s)
            except Exception as exc:            # requests' ReadTimeout / ConnectionError
                self.api.kill(container)
                raise EngineError(f"run {image}: did not finish within {timeout_s}s ({type(exc).__name__})") from None
            output = self.api.logs(container, stdout=True, stderr=True).decode("utf-8", "replace")
            files = {path: self._read_file(container, path, image) for path in collect}
            return RunResult(exit_code=int(status.get("StatusCode", -1)), output=output,
                             files={k: v.data for k, v in files.items() if v is not None})
        finally:
            self.api.remove_container(container, force=True)

    def _create(self, image: str, **kwargs) -> str:
        try:
            return self.api.create_container(image, command=["/m3-image-never-started"], **kwargs)["Id"]
        except docker_errors.ImageNotFound:
            raise EngineError(f"{image}: no such image in the engine") from None
        except docker_errors.APIError as exc:
            raise EngineError(f"create container from {image}: {_friendly(exc.explanation or str(exc))}") from None

    # -- build, save, load ----------------------------------------------------------------
    def build(self, context: Path | BinaryIO, dockerfile: str, tag: str, progress: ProgressFn | None = None,
              network_mode: str | None = None) -> str:
        """Build with the classic builder from a folder or an uncompressed tar stream."""
        source = ({"path": str(context)} if isinstance(context, (str, Path))
                  else {"fileobj": context, "custom_context": True})
        try:
            stream = self.api.build(**source, dockerfile=dockerfile, tag=tag, rm=True, forcerm=True,
                                    pull=False, decode=True, network_mode=network_mode)
            check_stream(stream, f"build {tag}", progress)
        except docker_errors.APIError as exc:
            raise EngineError(f"build {tag}: {_friendly(exc.explanation or str(exc))}") from None
        return self.inspect(tag)["Id"]

    def import_image(self, tar_path: Path, repository: str, tag: str) -> str:
        """``docker import`` a root filesystem tar as ``repository:tag``; returns the image id."""
        reference = f"{repository}:{tag}"
        try:
            raw = self.api.import_image_from_file(str(tar_path), repository=repository, tag=tag)
            lines = [line for line in str(raw).splitlines() if line.strip().startswith("{")]
            check_stream((json.loads(line) for line in lines), f"import {tar_path} as {reference}")
        except docker_errors.APIError as exc:
            raise EngineError(f"import {tar_path} as {reference}: {_friendly(exc.explanation or str(exc))}") from None
        image_id = self.image_id(reference)
        if image_id is None:
            raise EngineError(f"import {tar_path} as {reference}: the engine reports success but has no such image")
        return image_id

    def save(self, image: str) -> bytes:
        """``docker save`` of a *small* image (the delta), held in memory."""
        try:
            return b"".join(self.api.get_image(image))
        except docker_errors.APIError as exc:
            raise EngineError(f"save {image}: {_friendly(exc.explanation or str(exc))}") from None

    def load(self, archive: bytes) -> None:
        try:
            result = self.api.load_image(archive)
            check_stream(result if not isinstance(result, dict) else [result], "load assembled image")
        except docker_errors.APIError as exc:
            raise EngineError(f"load assembled image: {_friendly(exc.explanation or str(exc))}") from None

    # -- registry --------------------------------------------------------------------------
    def push(self, repository: str, tag: str, progress: ProgressFn | None = None) -> str:
        """Push ``repository:tag``; returns the manifest digest the registry reported."""
        try:
            stream = self.api.push(repository, tag=tag, stream=True, decode=True)
            chunks = check_stream(stream, f"push {repository}:{tag}", progress)
        except docker_errors.APIError as exc:
            raise EngineError(f"push {repository}:{tag}: {_friendly(exc.explanation or str(exc))}") from None
        for chunk in chunks:
            digest = chunk.get("aux", {}).get("Digest")
            if digest:
                return digest
        raise EngineError(f"push {repository}:{tag}: the engine reported no manifest digest")
