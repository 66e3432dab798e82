"""The unit folder's guard: a unit test that reaches for the engine or the network fails."""

import socket

import docker
import pytest


def test_a_socket_connection_is_refused():
    with pytest.raises(RuntimeError, match="no engine and no network"):
        socket.create_connection(("127.0.0.1", 5000), timeout=1)


def test_the_docker_engine_is_out_of_reach():
    with pytest.raises(Exception) as info:
        docker.from_env().ping()
    assert "no engine and no network" in str(info.value) or "no engine and no network" in repr(
        info.value.__context__
    )
