"""builder.engine without an engine: what kind of engine it is, Podman's glob paths, and the one
place engine errors become one line (a stand-in API object raises docker-py's real exceptions)."""

from __future__ import annotations

import pytest
import requests
from docker import errors as docker_errors

from builder.engine import Engine, EngineInfo, archive_path, engine_info
from builder.errors import EngineError

DOCKER_VERSION = {
    "Version": "20.10.24+dfsg1",
    "Components": [
        {"Name": "Engine", "Version": "20.10.24+dfsg1"},
        {"Name": "containerd", "Version": "1.6.20"},
    ],
}
PODMAN_VERSION = {
    "Version": "5.8.6",
    "Components": [
        {"Name": "Podman Engine", "Version": "5.8.6"},
        {"Name": "Conmon", "Version": "2.1"},
    ],
}
CLASSIC_INFO = {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "extfs"]]}
CONTAINERD_INFO = {
    "Driver": "overlayfs",
    "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]],
}


def test_engine_info():
    assert (
        str(engine_info(DOCKER_VERSION, CLASSIC_INFO))
        == "Docker Engine 20.10.24+dfsg1 (classic image store (overlay2))"
    )
    assert (
        str(engine_info({"Components": [{"Name": "Engine", "Version": "28.5.2"}]}, CONTAINERD_INFO))
        == "Docker Engine 28.5.2 (containerd image store (overlayfs))"
    )
    podman = engine_info(PODMAN_VERSION, {"Driver": "overlay"})
    assert podman.podman and str(podman) == "Podman Engine 5.8.6 (containers/storage (overlay))"
    assert (
        str(engine_info({}, {}))
        == "Docker Engine unknown version (classic image store (unknown driver))"
    )


def test_archive_path_is_glob_escaped_for_podman_only():
    path = (
        "/v/configs/E=128,N=384,device_name=AMD_Instinct_MI300X,"
        "dtype=fp8_w8a8,block_shape=[128,128].json"
    )
    podman = EngineInfo("Podman Engine", "5.8.6", "containers/storage (overlay)")
    docker = EngineInfo("Docker Engine", "28.5.2", "classic image store (overlay2)")
    assert archive_path(path, docker) == path
    assert archive_path(path, podman) == path.replace("[128,128]", r"\[128,128\]")
    assert archive_path("/a*b?c\\d", podman) == r"/a\*b\?c\\d"


class FakeAPI:
    """Answers like an engine whose every call fails with ``error``."""

    def __init__(self, error: Exception):
        self.error = error

    def __getattr__(self, name):
        def call(*args, **kwargs):
            raise self.error

        return call


class FakeClient:
    def __init__(self, error):
        self.api = FakeAPI(error)


def response(status: int) -> requests.Response:
    r = requests.Response()
    r.status_code = status
    return r


def engine_failing_with(error) -> Engine:
    return Engine(
        FakeClient(error), info=EngineInfo("Podman Engine", "5.8.6", "containers/storage (overlay)")
    )


NOT_FOUND = docker_errors.ImageNotFound(
    "404", response=response(404), explanation="No such image: x"
)
CONFLICT = docker_errors.APIError(
    "409",
    response=response(409),
    explanation='conflict: unable to remove repository reference "x" (must force)',
)
NO_API = docker_errors.APIError("404", response=response(404), explanation="page not found")
LOST = requests.ConnectionError("('Connection aborted.', RemoteDisconnected('closed'))")


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda e: e.inspect("x"), "x: no such image in the engine"),
        (lambda e: e.tag("x", "r", "t"), "tag r:t: No such image: x"),
    ],
)
def test_not_found(call, message):
    with pytest.raises(EngineError) as caught:
        call(engine_failing_with(NOT_FOUND))
    assert str(caught.value) == message


@pytest.mark.parametrize("method", ["image_id", "untag", "remove", "names_of"])
def test_absent_is_an_answer_not_an_error(method):
    assert getattr(engine_failing_with(NOT_FOUND), method)("x") in (None, [])


@pytest.mark.parametrize(
    "method, verb",
    [
        ("untag", "untag x"),
        ("remove", "remove x"),
        ("inspect", "inspect x"),
        ("image_id", "inspect x"),
    ],
)
@pytest.mark.parametrize(
    "error, needle",
    [
        (CONFLICT, "conflict: unable to remove repository reference"),
        (LOST, "the engine connection failed (ConnectionError"),
        (
            NO_API,
            "Podman Engine 5.8.6 (containers/storage (overlay)) does not provide this API (page "
            "not found)",
        ),
    ],
)
def test_every_engine_error_is_one_line(method, verb, error, needle):
    with pytest.raises(EngineError) as caught:
        getattr(engine_failing_with(error), method)("x")
    message = str(caught.value)
    assert message.startswith(f"{verb}: ") and needle in message and "\n" not in message


def test_container_start_failure_is_one_line():
    class StartFails(FakeAPI):
        removed: list = []

        def create_host_config(self, **kwargs):
            return {}

        def create_container(self, *args, **kwargs):
            return {"Id": "c1"}

        def start(self, container):
            raise docker_errors.APIError(
                "500",
                response=response(500),
                explanation=(
                    "crun: writing file `/sys/fs/cgroup/cgroup.subtree_control`: Operation not "
                    "supported\n"
                    "OCI runtime error"
                ),
            )

        def remove_container(self, container, force=False):
            self.removed.append((container, force))

    engine = engine_failing_with(None)
    engine.api = StartFails(None)
    with pytest.raises(EngineError) as caught:
        engine.run("img", ["true"], collect=[], timeout_s=5)
    message = str(caught.value)
    assert (
        message.startswith("run img: start container: crun: writing file") and "\n" not in message
    )
    assert engine.api.removed == [("c1", True)]  # and the container is gone
