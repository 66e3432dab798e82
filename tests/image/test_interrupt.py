"""A build interrupted as a CI runner cancels it (SIGTERM during validation) leaves nothing behind:
no validation container, no loaded image, no tag; one error line."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
import time
import uuid

import docker
import pytest
import yaml

from tests.image.conftest import REPO

pytestmark = pytest.mark.docker


def test_sigterm_during_validation_removes_container_and_image(
    standin_project, builder_cli, docker_client
):
    spec = yaml.safe_load((standin_project / "image.yaml").read_text())
    target = spec["targets"]["standin"]
    target["labels"] = {
        **(target.get("labels") or {}),
        "io.m3-image.test.interrupt": uuid.uuid4().hex,
    }
    target["lock"] = "locks/interrupt.lock.yaml"  # a lock, hence an image, of its own
    (standin_project / "interrupt.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    locked = builder_cli(standin_project, "lock", "--target", "standin", spec="interrupt.yaml")
    assert locked.returncode == 0, locked.stderr

    proc = subprocess.Popen(
        [
            os.sys.executable,
            "-m",
            "builder",
            "--spec",
            str(standin_project / "interrupt.yaml"),
            "image",
            "--target",
            "standin",
        ],
        cwd=str(REPO),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True)
    reader.start()
    image_id = container = None
    seen: list[str] = []
    deadline = time.monotonic() + 600
    try:
        while container is None and time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.2)
                seen.append(line)
                found = re.match(r"^\s+image (sha256:[0-9a-f]{64})$", line)
                image_id = found.group(1) if found else image_id
            except queue.Empty:
                pass
            if image_id and any("validate: smoke suite" in s for s in seen):
                running = docker_client.api.containers(
                    filters={"ancestor": image_id, "status": "running"}
                )
                container = running[0]["Id"] if running else None
            assert proc.poll() is None, "".join(seen)
        assert container, "".join(seen)
        proc.send_signal(signal.SIGTERM)  # what a CI runner sends on cancel
        proc.wait(timeout=120)
        reader.join(30)
        out = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    while not lines.empty():
        seen.append(lines.get())
    errors = [line for line in seen if line.startswith("error: ")]
    assert proc.returncode == 128 + signal.SIGTERM, "".join(seen)
    assert errors == ["error: interrupted by SIGTERM; what this run started was removed\n"], (
        "".join(seen)
    )
    assert not any(line.startswith("Traceback") for line in seen)
    with pytest.raises(docker.errors.NotFound):
        docker_client.api.inspect_container(container)  # the validation container is gone
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.api.inspect_image(image_id)  # and so is the loaded image
    assert not docker_client.api.containers(all=True, filters={"ancestor": image_id})
    assert "(not validated" not in out and " sha256:" not in out  # no result line, no tag
