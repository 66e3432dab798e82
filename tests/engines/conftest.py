"""The engine matrix: Docker 20.10 (the host engine), Docker 28.5.2 with the classic and with the
containerd image store, Podman 5.8.6, each nested in the host engine by its launcher script in
scripts/engines/ (idempotent; a Debian sid rootfs, cached under build/cache/). Engines that
cannot be started skip locally and fail in CI."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

import docker
import pytest

from builder.engine import Engine
from tests.conftest import REPO_ROOT, _unavailable
from tests.delivery.conftest import snapshot, standin_project  # noqa: F401  (session fixtures reused)

MATRIX = ["docker20-host", "docker28-classic", "docker28-containerd", "podman"]
LAUNCHERS = {name: REPO_ROOT / "scripts" / "engines" / f"{name}.sh" for name in MATRIX[1:]}


@dataclass(frozen=True)
class EngineUnderTest:
    name: str
    docker_host: str
    engine: Engine

    @property
    def env(self) -> dict:
        return {"DOCKER_HOST": self.docker_host}


def start(name: str, docker_client) -> EngineUnderTest:
    if name == "docker20-host":
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    else:
        result = subprocess.run(
            ["bash", str(LAUNCHERS[name])], capture_output=True, text=True, timeout=1500
        )
        if result.returncode != 0:
            _unavailable(f"{name}: {LAUNCHERS[name].name} failed: {result.stderr.strip()[-500:]}")
        host = result.stdout.strip().splitlines()[-1]
    client = docker.DockerClient(base_url=host, timeout=600)
    return EngineUnderTest(name=name, docker_host=host, engine=Engine(client))


@pytest.fixture(scope="session")
def engines(docker_client):
    """``engines(name)``: the engine of the matrix called ``name``, started once per session."""
    started: dict[str, EngineUnderTest] = {}

    def get(name: str) -> EngineUnderTest:
        if name not in started:
            started[name] = start(name, docker_client)
        return started[name]

    return get


@pytest.fixture(params=MATRIX)
def engine_under_test(request, engines) -> EngineUnderTest:
    return engines(request.param)
