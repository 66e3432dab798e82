"""Fixtures for delivery tests: a private snapshot of the builder (so concurrent edits to the
working tree cannot drift its locks mid-session), projects whose output goes to the plain and
the htpasswd registry under per-session repositories, throwaway registries for destructive
tests, and per-test docker configs."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from base64 import b64encode
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from builder.engine import Engine
from builder.log import StepLog
from tests.image.conftest import standin_project  # noqa: F401  (session fixture reused)

REPO = Path(__file__).resolve().parents[2]
SESSION = uuid.uuid4().hex[:8]
PLANTED_SECRET = f"planted-{uuid.uuid4().hex}-secret"


# -- the builder, frozen for the session ---------------------------------------------------------
@pytest.fixture(scope="session")
def snapshot(tmp_path_factory, standin_project) -> Path:  # noqa: F811 (the session fixture imported above)
    root = tmp_path_factory.mktemp("delivery-snapshot")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("builder", "smoke", "dockerfiles"):
        shutil.copytree(REPO / name, root / name, ignore=ignore)
    for name in ("patches", "tuning"):
        shutil.copytree(standin_project / name, root / name, ignore=ignore)
    return root


@dataclass
class Project:
    root: Path
    spec: Path
    repository: str
    aliases: list[str]

    @property
    def lock_file(self) -> Path:
        return self.root / "locks" / f"{self.spec.stem}.lock.yaml"

    def lock(self):
        from builder.lock import read_lock

        return read_lock(self.lock_file)

    def tag(self) -> str:
        from builder.lock import content_tag

        return content_tag(self.lock())

    def reference(self) -> str:
        return f"{self.repository}:{self.tag()}"


def builder_cli(
    project: Project, *args: str, env: dict | None = None
) -> subprocess.CompletedProcess:
    """``python -m builder --spec <project> ...`` run from the snapshot (its builder, its
    build/)."""
    return subprocess.run(
        [sys.executable, "-m", "builder", "--spec", str(project.spec), *args],
        cwd=project.root,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(project.root), **(env or {})},
        timeout=1800,
    )


def make_project(
    snapshot: Path,
    source_project: Path,
    name: str,
    repository: str,
    aliases: list[str],
) -> Project:
    spec = yaml.safe_load((source_project / "image.yaml").read_text())
    target = spec["targets"]["standin"]
    target["output"] = {"repository": repository, "aliases": aliases}
    target["lock"] = f"locks/{name}.lock.yaml"
    path = snapshot / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return Project(root=snapshot, spec=path, repository=repository, aliases=aliases)


def locked(project: Project, env: dict | None = None) -> Project:
    result = builder_cli(project, "lock", "--target", "standin", env=env)
    assert result.returncode == 0, result.stderr
    return project


def build_and_release(
    project: Project, engine: Engine, env: dict | None = None
) -> tuple[str, subprocess.CompletedProcess]:
    """Build (``image --rebuild --skip-validation``), then apply the tags ``builder image`` applies
    once validation passed. Validation itself (builder.validate, the in-image smoke suite) is
    another suite's subject; here it stands for "this image may be published"."""
    result = builder_cli(
        project, "image", "--target", "standin", "--rebuild", "--skip-validation", env=env
    )
    assert result.returncode == 0, result.stderr
    image_id = result.stdout.split()[0]
    assert image_id.startswith("sha256:"), result.stdout
    for tag in (project.tag(), *project.aliases):
        engine.tag(image_id, project.repository, tag)
    return image_id, result


@pytest.fixture(scope="session")
def engine(docker_client) -> Engine:
    return Engine(docker_client)


def quiet_log() -> StepLog:
    return StepLog(stream=io.StringIO())


# -- docker configs --------------------------------------------------------------------------------
def write_docker_config(directory: Path, auths: dict[str, tuple[str, str]]) -> dict:
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "auths": {
            registry: {"auth": b64encode(f"{user}:{password}".encode()).decode()}
            for registry, (user, password) in auths.items()
        }
    }
    (directory / "config.json").write_text(json.dumps(config))
    return {"DOCKER_CONFIG": str(directory)}


@pytest.fixture
def docker_config_env(tmp_path, monkeypatch):
    """Write a docker config in tmp and point DOCKER_CONFIG (this process too) at it."""

    def make(auths: dict[str, tuple[str, str]], name: str = "docker-config") -> dict:
        env = write_docker_config(tmp_path / name, auths)
        monkeypatch.setenv("DOCKER_CONFIG", env["DOCKER_CONFIG"])
        return env

    return make


# -- projects --------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def plain_project(snapshot, standin_project, registry) -> Project:  # noqa: F811 (the session fixture imported above)
    return locked(
        make_project(
            snapshot,
            standin_project,
            "delivery-plain",
            f"{registry}/m3-image/delivery-{SESSION}",
            ["latest", "stable"],
        )
    )


@pytest.fixture(scope="session")
def plain_image(plain_project, engine) -> str:
    image_id, _ = build_and_release(plain_project, engine)
    return image_id


@pytest.fixture(scope="session")
def plain_pushed(plain_project, plain_image):
    result = builder_cli(plain_project, "push", "--target", "standin")
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="session")
def auth_project(snapshot, standin_project, auth_registry) -> Project:  # noqa: F811 (the session fixture imported above)
    return locked(
        make_project(
            snapshot,
            standin_project,
            "delivery-auth",
            f"{auth_registry.address}/m3-image/delivery-{SESSION}",
            ["latest"],
        )
    )


@pytest.fixture(scope="session")
def auth_built(auth_project, engine, auth_registry, tmp_path_factory):
    """Built with a docker config that holds the real password and a planted secret."""
    env = write_docker_config(
        tmp_path_factory.mktemp("secret-config"),
        {
            auth_registry.address: (auth_registry.user, auth_registry.password),
            "127.0.0.1:5000": ("planted-user", PLANTED_SECRET),
        },
    )
    image_id, result = build_and_release(auth_project, engine, env=env)
    return image_id, result, env


def one_error_line(result) -> str:
    """The single `error: ...` line of a failed builder run (exit status 2)."""
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    return lines[0]


# -- throwaway registries --------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def v2_status(address: str) -> int | None:
    try:
        with urllib.request.urlopen(f"http://{address}/v2/", timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


class ThrowawayRegistry:
    """``docker-registry serve`` on a free port with storage in tmp; stop/start keep the storage."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.config = root / "config.yml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "version": 0.1,
                    "log": {"level": "info"},
                    "storage": {
                        "filesystem": {"rootdirectory": str(root / "data")},
                        "delete": {"enabled": True},
                    },
                    "http": {"addr": self.address, "secret": uuid.uuid4().hex},
                }
            )
        )
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["docker-registry", "serve", str(self.config)],
            stdout=(self.root / "registry.log").open("a"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while v2_status(self.address) != 200:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(
                    "throwaway registry did not start: "
                    f"{(self.root / 'registry.log').read_text()[-1000:]}"
                )
            time.sleep(0.1)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture
def throwaway_registry(tmp_path):
    if shutil.which("docker-registry") is None:
        pytest.fail(
            "docker-registry not installed (apt-get install docker-registry)", pytrace=False
        )
    reg = ThrowawayRegistry(tmp_path / "registry")
    reg.start()
    yield reg
    reg.kill()


# -- small images made with docker-py --------------------------------------------------------------
def build_image(
    docker_client, tmp_path: Path, tag: str, files: dict[str, bytes], base: str = "scratch"
) -> str:
    context = tmp_path / f"ctx-{uuid.uuid4().hex[:6]}"
    context.mkdir()
    lines = [f"FROM {base}"]
    for i, (dest, data) in enumerate(files.items()):
        (context / f"f{i}").write_bytes(data)
        lines.append(f"COPY f{i} {dest}")
    (context / "Dockerfile").write_text("\n".join(lines) + "\n")
    image, _ = docker_client.images.build(
        path=str(context), tag=tag, rm=True, forcerm=True, pull=False
    )
    shutil.rmtree(context)
    return image.id


# -- small images made by the builder's own assembly (no engine) -----------------------------------
def tiny_image(
    tmp_path: Path, files: dict[str, bytes], base_reference: str = "127.0.0.1:5000/m3-image/none:x"
):
    """(BuiltImage, ResolvedBase): one canonical layer on an empty base, for pushes through
    the registry API that need no engine and no base layers."""
    from builder.assemble import Delta, assemble
    from builder.base import ResolvedBase
    from builder.hashing import sha256_bytes
    from builder.layer import canonical_layer
    from builder.spec import BaseImage

    root = tmp_path / f"tree-{uuid.uuid4().hex[:6]}"
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    layer = canonical_layer(root, 0)
    raw_config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "created": "1970-01-01T00:00:00Z",
            "rootfs": {"type": "layers", "diff_ids": []},
        }
    ).encode()
    base = ResolvedBase(
        image=BaseImage(
            image=base_reference.rsplit(":", 1)[0],
            digest="sha256:" + "0" * 64,
            platform="linux/amd64",
        ),
        manifest_digest="sha256:" + "0" * 64,
        config_digest="sha256:" + sha256_bytes(raw_config),
        raw_config=raw_config,
        raw_manifest=json.dumps({"layers": []}).encode(),
    )
    delta = Delta(layer=layer, diff_id="sha256:" + sha256_bytes(layer), labels={"t": "1"}, env=[])
    return assemble(base, delta, "tiny"), base
