"""Fast unit tests, one file per module: pure functions only, no engine, no registry, no network.

`make unit` runs this folder (and the engine-free tests/builder) in seconds. A test that
needs dockerd, a registry, the vLLM sources or a GPU belongs in the other folders (see
docs/development.md). The guard below makes any socket connection here an error, so a unit
test cannot quietly start to depend on a service.
"""

import socket
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(self, address, *args, **kwargs):
        raise RuntimeError(f"unit tests use no engine and no network (connect to {address!r})")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
