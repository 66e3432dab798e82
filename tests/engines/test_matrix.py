"""One lock, every engine: build, load, validate, tag, push, pull-instead-of-build, verify, resolve.

The builder owns every byte, so every engine must give the same config digest, the same delta
layer digest and push the same manifest digest; the first push uploads, every later one (another
engine, same lock) is a no-op. Apptainer then pulls the pushed image by digest and a patched
file's sha256 inside it is the lock's.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from builder.provenance import image_labels
from tests.conftest import REPO_ROOT
from tests.delivery.conftest import SESSION, builder_cli, locked, make_project

pytestmark = [pytest.mark.docker, pytest.mark.registry]
RESULTS: dict[str, dict] = {}
DIGEST = r"sha256:[0-9a-f]{64}"


@pytest.fixture(scope="module")
def project(snapshot, standin_project, registry):  # noqa: F811
    return locked(
        make_project(
            snapshot, standin_project, "matrix", f"{registry}/m3-image/matrix-{SESSION}", ["latest"]
        )
    )


def ok(result):
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result


def test_engine_flow(engine_under_test, project, standin_base):
    eut, env = engine_under_test, engine_under_test.env
    engine = eut.engine
    # build, load, validate, tag; --rebuild: a copy another engine pushed must be reproduced exactly
    built = ok(builder_cli(project, "image", "--target", "standin", "--rebuild", env=env))
    ref, image_id = built.stdout.strip().splitlines()[-1].split()
    assert ref == project.reference()
    config, manifest = re.search(rf"config ({DIGEST}), manifest ({DIGEST})", built.stderr).groups()
    delta = re.search(rf"delta layer ({DIGEST}) \((\d+) bytes\)", built.stderr).group(1)
    assert image_id in (config, manifest)  # classic/Podman: config; containerd store: manifest
    if RESULTS:
        assert f"reproduced the registry copy: image {config} == config of" in built.stderr
    # labels: exactly the base's plus the builder's, nothing the engine added
    lock = project.lock()
    inspected = engine.inspect(image_id)
    base_labels = engine.inspect(standin_base.reference)["Config"].get("Labels") or {}
    expected = {**base_labels, **image_labels(lock, dict(lock.inputs.labels))}
    assert (inspected["Config"].get("Labels") or {}) == expected

    pushed = ok(builder_cli(project, "push", "--target", "standin", env=env))
    assert f"{project.reference()} {manifest}" in pushed.stdout  # the builder's manifest, pushed
    no_op = "nothing to push" in pushed.stderr

    # pull instead of build: nothing local but the base
    for tag in (project.tag(), *project.aliases):
        engine.untag(f"{project.repository}:{tag}")
    engine.remove(image_id)
    assert (
        engine.find_image(
            [config, manifest],
            json.loads(engine_config(lock, project, config))["rootfs"]["diff_ids"],
            config_digest=config,
        )
        is None
    )
    pulled = ok(builder_cli(project, "image", "--target", "standin", env=env))
    assert pulled.stdout.strip().endswith("(pulled, not built)"), pulled.stdout
    assert "build delta layer" not in pulled.stderr

    verified = ok(builder_cli(project, "verify", "--target", "standin", env=env))
    assert verified.stdout.startswith(f"{project.repository}@{manifest}: verified against")
    ok(builder_cli(project, "verify", project.reference(), "--target", "standin", env=env))
    resolved = dict(
        line.split("=", 1)
        for line in ok(
            builder_cli(project, "resolve", "--target", "standin", env=env)
        ).stdout.splitlines()
        if "=" in line
    )
    assert resolved["MANIFEST_DIGEST"] == manifest and resolved["IMAGE_ID"] == config
    RESULTS[eut.name] = {
        "config": config,
        "delta": delta,
        "manifest": manifest,
        "no_op": no_op,
        "engine": eut.engine.describe(),
    }
    print(
        f"\n{eut.engine.describe()}: config {config} delta {delta} manifest {manifest} "
        f"push {'no-op' if no_op else 'uploaded'}"
    )


def engine_config(lock, project, config_digest: str) -> bytes:
    from builder.registry import client_for

    client, ref = client_for(project.reference())
    return client.get_blob(ref.repository, config_digest)


def test_same_identity_on_every_engine():
    from tests.engines.conftest import MATRIX

    assert sorted(RESULTS) == sorted(MATRIX), f"engines that completed the flow: {sorted(RESULTS)}"
    identities = {(r["config"], r["delta"], r["manifest"]) for r in RESULTS.values()}
    assert len(identities) == 1, json.dumps(RESULTS, indent=1)
    first = RESULTS[MATRIX[0]]
    assert not first["no_op"]  # the first engine uploaded
    assert all(
        RESULTS[name]["no_op"] for name in MATRIX[1:]
    )  # every other engine's push was a no-op


def test_apptainer_pulls_by_digest_and_the_patched_file_matches(project):
    from tests.engines.conftest import MATRIX

    assert RESULTS, "no engine pushed"
    manifest = RESULTS[MATRIX[0]]["manifest"]
    lock = project.lock().to_doc()
    rel, fingerprint = next(
        (rel, fp)
        for rel, fp in sorted(lock["files"].items())
        if fp["pre"] != "absent" and rel.endswith(".py")
    )
    path = f"{lock['vllm']['root']}/{rel}"
    script = REPO_ROOT / "scripts" / "engines" / "apptainer-pull.sh"
    result = subprocess.run(
        ["bash", str(script), f"{project.repository}@{manifest}", path],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[0] == fingerprint["post"]["sha256"], result.stdout
