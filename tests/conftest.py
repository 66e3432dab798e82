"""Session fixtures for the services tests need: the Docker engine, the two local
registries (scripts/start-registry.sh) and the stand-in base image.

A missing service skips the tests that need it on a developer machine and fails them
when the CI environment variable is set (.ci/run starts everything)."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CACHE_DIR = REPO_ROOT / "build" / "cache"
AUTH_ENV = Path(os.environ.get("M3_REGISTRY_ROOT", "/var/lib/m3-registry")) / "auth-credentials.env"
PLAIN_REGISTRY = "127.0.0.1:5000"
# fixtures that need the pinned vLLM sources (build/cache, fetched from PyPI on first use)
VLLM_SOURCE_FIXTURES = {
    "pristine_vllm_site",
    "pristine_site",
    "patched_site",
    "vllm_on_path",
    "conv",
    "patched_tree",
}


@dataclass(frozen=True)
class AuthRegistry:
    address: str
    user: str
    password: str


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must provide it: see .ci/run)", pytrace=False)
    pytest.skip(reason)


def _v2_status(address: str) -> int | str:
    """HTTP status of GET /v2/ (200 open, 401 auth), or why nothing answered."""
    try:
        with urllib.request.urlopen(f"http://{address}/v2/", timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError) as exc:
        return str(getattr(exc, "reason", exc))


def pytest_collection_modifyitems(items):
    """Mark tests by the services their fixtures pull in (pyproject declares the markers)."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & {"docker_client", "standin_base", "pinned_base"}:
            item.add_marker(pytest.mark.docker)
        if names & {"registry", "auth_registry", "standin_base", "pinned_base"}:
            item.add_marker(pytest.mark.registry)
        if names & VLLM_SOURCE_FIXTURES:
            item.add_marker(pytest.mark.vllm_sources)


@pytest.fixture(scope="session")
def docker_client():
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # DockerException, requests' ConnectionError, ...
        _unavailable(
            f"Docker engine unreachable ({type(exc).__name__}); start it with "
            "scripts/start-dockerd.sh"
        )
    yield client
    client.close()


@pytest.fixture(scope="session")
def registry() -> str:
    status = _v2_status(PLAIN_REGISTRY)
    if status != 200:
        _unavailable(
            f"plain registry {PLAIN_REGISTRY} not up (GET /v2/: {status}); "
            f"start it with scripts/start-registry.sh"
        )
    return PLAIN_REGISTRY


@pytest.fixture(scope="session")
def auth_registry() -> AuthRegistry:
    if not AUTH_ENV.is_file():
        _unavailable(f"{AUTH_ENV} missing; start the registries with scripts/start-registry.sh")
    values = dict(line.split("=", 1) for line in AUTH_ENV.read_text().splitlines() if "=" in line)
    try:
        registry = AuthRegistry(
            values["M3_AUTH_REGISTRY"],
            values["M3_AUTH_REGISTRY_USER"],
            values["M3_AUTH_REGISTRY_PASSWORD"],
        )
    except KeyError as exc:
        pytest.fail(f"{AUTH_ENV}: no {exc.args[0]}", pytrace=False)
    status = _v2_status(registry.address)
    if status != 401:
        _unavailable(
            f"auth registry {registry.address} not up (GET /v2/: {status}, want 401); "
            f"start it with scripts/start-registry.sh"
        )
    return registry


@pytest.fixture(scope="session")
def standin_base(docker_client, registry):
    from builder.engine import Engine
    from standin.build import build_standin_base

    return build_standin_base(Engine(docker_client), CACHE_DIR, registry=registry)


@pytest.fixture(scope="session")
def pinned_base(docker_client, registry, standin_base):
    """The pinned-faithful stand-in: standin_base + vLLM 4a560dd8's bytes of the touched files."""
    from builder.engine import Engine
    from standin.pinned import build_pinned_base

    return build_pinned_base(Engine(docker_client), standin_base, registry=registry)
