"""Fixtures for end-to-end image builds: a project copy pinned to the stand-in, a second engine."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import docker
import pytest
import yaml

from builder.engine import Engine

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def standin_project(tmp_path_factory, standin_base):
    """A copy of the project's inputs with a spec whose `standin` target is pinned to the
    stand-in."""
    root = tmp_path_factory.mktemp("project")
    for name in ("patches", "tuning"):
        shutil.copytree(REPO / name, root / name)
    spec = yaml.safe_load((REPO / "image.yaml").read_text())
    target = spec["targets"]["standin"]
    target["base"] = {
        "image": target["base"]["image"],
        "digest": standin_base.digest,
        "platform": "linux/amd64",
    }
    target["lock"] = "locks/standin.lock.yaml"
    spec["targets"] = {"standin": target}
    spec["default_target"] = "standin"
    (root / "image.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return root


def run_builder(
    project: Path, *args: str, env: dict | None = None, spec: str = "image.yaml"
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(os.sys.executable)), "-m", "builder", "--spec", str(project / spec), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=1800,
    )


@pytest.fixture(scope="session")
def builder_cli():
    """``builder_cli(project, *args, env=..., spec=...)``: run ``python -m builder`` on a project
    copy."""
    return run_builder


@pytest.fixture
def second_engine(tmp_path_factory):
    """A fresh dockerd with its own empty data root: a clean engine for reproducibility checks."""
    root = Path(tmp_path_factory.mktemp("engine"))
    sock = root / "docker.sock"
    # Its own bridge: with `--bridge none` dockerd tears down the host's docker0, which the
    # main engine needs. No container runs in this engine, so the bridge carries no traffic.
    bridge = f"m3e2e{os.getpid() % 10000}"
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True, capture_output=True)
    subprocess.run(
        ["ip", "addr", "add", "172.31.254.1/24", "dev", bridge], check=True, capture_output=True
    )
    proc = subprocess.Popen(
        [
            "dockerd",
            "--data-root",
            str(root / "data"),
            "--exec-root",
            str(root / "exec"),
            "--pidfile",
            str(root / "docker.pid"),
            "--host",
            f"unix://{sock}",
            "--bridge",
            bridge,
            "--iptables=false",
            "--ip-masq=false",
            "--storage-driver",
            "overlay2",
        ],
        stdout=(root / "dockerd.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    client = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                client = docker.DockerClient(base_url=f"unix://{sock}", timeout=600)
                client.ping()
                break
            except Exception:
                client = None
                time.sleep(0.5)
        if client is None:
            pytest.fail(
                f"second dockerd did not start: {(root / 'dockerd.log').read_text()[-2000:]}"
            )
        yield Engine(client), f"unix://{sock}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        subprocess.run(["umount", "-R", str(root / "data")], capture_output=True)
        subprocess.run(["ip", "link", "delete", bridge], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
