"""builder.assemble: the final config is the base's plus one layer, byte-stable; the load archive
is minimal."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import pytest
from m3_builder_testlib import DIGEST_A

from builder.assemble import (
    Delta,
    assemble,
    compose_config,
    image_manifest,
    load_archive,
    read_delta,
)
from builder.base import ResolvedBase
from builder.errors import EngineError
from builder.spec import BaseImage

CREATED = "2025-03-04T05:06:07.123456789Z"
BASE_HISTORY = [
    {"created": "2025-01-01T00:00:00Z", "created_by": "/bin/sh -c #(nop) ADD file:abc in / "},
    {
        "created": "2025-01-01T00:00:01Z",
        "created_by": '/bin/sh -c #(nop)  CMD ["bash"]',
        "empty_layer": True,
    },
    {
        "created": CREATED,
        "created_by": "RUN pip install vllm # buildkit",
        "comment": "buildkit.dockerfile.v0",
    },
]
BASE_DIFF_IDS = ["sha256:" + "1" * 64, "sha256:" + "2" * 64]


def make_base(**overrides) -> ResolvedBase:
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": CREATED,
        "container": "deadbeef",
        "container_config": {"Cmd": ["/bin/sh"]},
        "config": {
            "Env": ["PATH=/usr/bin:/bin", "M3_FLAG=old", "LANG=C.UTF-8"],
            "Labels": {"base.label": "kept", "shared": "base"},
            "Cmd": ["bash"],
        },
        "rootfs": {"type": "layers", "diff_ids": list(BASE_DIFF_IDS)},
        "history": [dict(h) for h in BASE_HISTORY],
    }
    config.update(overrides)
    raw = json.dumps(config, indent=2).encode()  # deliberately not our own formatting
    return ResolvedBase(
        image=BaseImage(image="127.0.0.1:5000/m3/base:v1", digest=DIGEST_A, platform="linux/amd64"),
        manifest_digest=DIGEST_A,
        config_digest="sha256:" + hashlib.sha256(raw).hexdigest(),
        raw_config=raw,
    )


def make_delta() -> Delta:
    layer = b"pretend layer tar bytes"
    return Delta(
        layer=layer,
        diff_id="sha256:" + hashlib.sha256(layer).hexdigest(),
        labels={"io.m3.lock": "abc", "shared": "ours"},
        env=["M3_FLAG=new", "EXTRA=1"],
    )


def test_compose_config():
    base, delta = make_base(), make_delta()
    out = compose_config(base, delta, history_comment="0.24.0-m3-0123456789abcdef")
    config = json.loads(out)
    base_cfg = base.config
    assert config["history"][:3] == base_cfg["history"]
    for ours, theirs in zip(config["history"], BASE_HISTORY, strict=False):
        assert json.dumps(ours, separators=(",", ":")) == json.dumps(
            theirs, separators=(",", ":")
        )  # key order kept
    assert len(config["history"]) == len(BASE_HISTORY) + 1
    assert config["history"][-1] == {
        "created": CREATED,
        "created_by": "m3-image: patched vLLM files, MI300X MoE tables, smoke suite (one layer)",
        "comment": "0.24.0-m3-0123456789abcdef",
    }
    assert config["rootfs"] == {"type": "layers", "diff_ids": BASE_DIFF_IDS + [delta.diff_id]}
    assert config["config"]["Labels"] == {
        "base.label": "kept",
        "shared": "ours",
        "io.m3.lock": "abc",
    }
    assert config["config"]["Env"] == [
        "PATH=/usr/bin:/bin",
        "LANG=C.UTF-8",
        "M3_FLAG=new",
        "EXTRA=1",
    ]
    assert config["config"]["Cmd"] == ["bash"]
    assert config["created"] == CREATED
    assert "container" not in config and "container_config" not in config
    assert list(config) == ["architecture", "os", "created", "config", "rootfs", "history"]
    # compact, deterministic bytes
    assert out == json.dumps(config, separators=(",", ":")).encode()
    assert compose_config(make_base(), make_delta(), "0.24.0-m3-0123456789abcdef") == out
    assert compose_config(base, delta, "other") != out


def test_compose_config_base_without_labels_env_or_created():
    base = make_base(config=None, history=None)
    raw = json.loads(base.raw_config)
    del raw["created"]
    base = ResolvedBase(
        image=base.image,
        manifest_digest=base.manifest_digest,
        config_digest=base.config_digest,
        raw_config=json.dumps(raw).encode(),
    )
    config = json.loads(compose_config(base, make_delta(), "c"))
    assert config["created"] == "1970-01-01T00:00:00Z"
    assert config["config"] == {
        "Labels": {"io.m3.lock": "abc", "shared": "ours"},
        "Env": ["M3_FLAG=new", "EXTRA=1"],
    }
    assert config["history"] == [
        {
            "created": "1970-01-01T00:00:00Z",
            "created_by": (
                "m3-image: patched vLLM files, MI300X MoE tables, smoke suite (one layer)"
            ),
            "comment": "c",
        }
    ]


def test_base_is_not_mutated():
    base = make_base()
    raw = base.raw_config
    compose_config(base, make_delta(), "c")
    assert base.raw_config == raw


BASE_LAYERS = [
    {
        "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
        "digest": "sha256:" + "3" * 64,
        "size": 10,
    },
    {
        "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
        "digest": "sha256:" + "4" * 64,
        "size": 20,
        "annotations": {"dropped": "yes"},
    },
]


def with_manifest(base: ResolvedBase, layers=None) -> ResolvedBase:
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"digest": base.config_digest},
        "layers": BASE_LAYERS if layers is None else layers,
    }
    return ResolvedBase(
        image=base.image,
        manifest_digest=base.manifest_digest,
        config_digest=base.config_digest,
        raw_config=base.raw_config,
        raw_manifest=json.dumps(manifest).encode(),
    )


def test_image_manifest_is_the_builders_own():
    base, delta = with_manifest(make_base()), make_delta()
    image = assemble(base, delta, "c")
    manifest = json.loads(image.manifest)
    assert image.config == compose_config(base, delta, "c")
    assert manifest == {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": image.config_digest,
            "size": len(image.config),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": "sha256:" + "3" * 64,
                "size": 10,
            },
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": "sha256:" + "4" * 64,
                "size": 20,
            },
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": delta.diff_id,
                "size": len(delta.layer),
            },
        ],
    }
    assert image.manifest == json.dumps(manifest, separators=(",", ":")).encode()
    assert image.manifest_digest == "sha256:" + hashlib.sha256(image.manifest).hexdigest()
    assert assemble(with_manifest(make_base()), make_delta(), "c") == image  # byte-stable
    assert image_manifest(image.config, base, delta.diff_id, len(delta.layer)) == image.manifest


@pytest.mark.parametrize(
    "layers, needle",
    [
        (
            [
                {
                    "mediaType": "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
                    "digest": "sha256:" + "3" * 64,
                    "size": 1,
                }
            ]
            * 2,
            "foreign or unknown layer",
        ),
        (BASE_LAYERS[:1], "lists 1 layers, its config 2"),
    ],
)
def test_image_manifest_refuses(layers, needle):
    with pytest.raises(EngineError) as caught:
        assemble(with_manifest(make_base(), layers), make_delta(), "c")
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_load_archive():
    image = assemble(with_manifest(make_base()), make_delta(), "c")
    archive = load_archive(image)

    def blob(digest):
        return "blobs/sha256/" + digest.split(":")[1]

    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = tar.getmembers()
        names = [m.name for m in members]
        assert names == sorted(names)
        assert set(names) == {
            blob(image.config_digest),
            blob(image.delta.diff_id),
            blob(image.manifest_digest),
            "index.json",
            "manifest.json",
            "oci-layout",
        }
        for m in members:
            assert m.isfile() and (m.mtime, m.uid, m.gid, m.mode, m.uname) == (0, 0, 0, 0o644, "")

        def read(name):
            return tar.extractfile(name).read()

        assert read(blob(image.config_digest)) == image.config
        assert read(blob(image.delta.diff_id)) == image.delta.layer
        assert read(blob(image.manifest_digest)) == image.manifest
        docker_manifest = json.loads(read("manifest.json"))
        index = json.loads(read("index.json"))
        assert json.loads(read("oci-layout")) == {"imageLayoutVersion": "1.0.0"}
    # Docker's view: the config and every layer by blob path; the base layers are not shipped
    assert docker_manifest == [
        {
            "Config": blob(image.config_digest),
            "RepoTags": None,
            "Layers": [
                blob("sha256:" + "3" * 64),
                blob("sha256:" + "4" * 64),
                blob(image.delta.diff_id),
            ],
        }
    ]
    # the OCI view: the builder's manifest
    assert index["manifests"] == [
        {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": image.manifest_digest,
            "size": len(image.manifest),
        }
    ]
    assert load_archive(assemble(with_manifest(make_base()), make_delta(), "c")) == archive


def _saved(
    layer: bytes, diff_ids: list[str] | None = None, layers: int = 1, images: int = 1
) -> bytes:
    config = {
        "config": {"Labels": {"a": "b"}, "Env": ["X=1"]},
        "rootfs": {
            "type": "layers",
            "diff_ids": diff_ids
            if diff_ids is not None
            else ["sha256:" + hashlib.sha256(layer).hexdigest()],
        },
    }
    raw = json.dumps(config).encode()
    manifest = [
        {"Config": "cfg.json", "RepoTags": ["d:t"], "Layers": ["l/layer.tar"] * layers}
    ] * images
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in (
            ("cfg.json", raw),
            ("l/layer.tar", layer),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_read_delta():
    delta = read_delta(_saved(b"layer!"))
    assert delta == Delta(
        layer=b"layer!",
        diff_id="sha256:" + hashlib.sha256(b"layer!").hexdigest(),
        labels={"a": "b"},
        env=["X=1"],
    )


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"layers": 2}, "expected exactly one image with one layer"),
        ({"images": 2}, "expected exactly one image with one layer"),
        ({"diff_ids": ["sha256:" + "0" * 64]}, "does not match its config"),
    ],
)
def test_read_delta_refuses(kwargs, needle):
    with pytest.raises(EngineError) as info:
        read_delta(_saved(b"layer!", **kwargs))
    assert "\n" not in str(info.value) and needle in str(info.value)
