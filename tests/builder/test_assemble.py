"""builder.assemble: the final config is the base's plus one layer, byte-stable; the load archive is minimal."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import pytest

from builder.assemble import Delta, compose_config, image_archive, read_delta
from builder.base import ResolvedBase
from builder.errors import EngineError
from builder.spec import BaseImage
from m3_builder_testlib import DIGEST_A

CREATED = "2025-03-04T05:06:07.123456789Z"
BASE_HISTORY = [
    {"created": "2025-01-01T00:00:00Z", "created_by": "/bin/sh -c #(nop) ADD file:abc in / "},
    {"created": "2025-01-01T00:00:01Z", "created_by": "/bin/sh -c #(nop)  CMD [\"bash\"]", "empty_layer": True},
    {"created": CREATED, "created_by": "RUN pip install vllm # buildkit", "comment": "buildkit.dockerfile.v0"},
]
BASE_DIFF_IDS = ["sha256:" + "1" * 64, "sha256:" + "2" * 64]


def make_base(**overrides) -> ResolvedBase:
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": CREATED,
        "container": "deadbeef",
        "container_config": {"Cmd": ["/bin/sh"]},
        "config": {"Env": ["PATH=/usr/bin:/bin", "M3_FLAG=old", "LANG=C.UTF-8"],
                   "Labels": {"base.label": "kept", "shared": "base"}, "Cmd": ["bash"]},
        "rootfs": {"type": "layers", "diff_ids": list(BASE_DIFF_IDS)},
        "history": [dict(h) for h in BASE_HISTORY],
    }
    config.update(overrides)
    raw = json.dumps(config, indent=2).encode()       # deliberately not our own formatting
    return ResolvedBase(image=BaseImage(image="127.0.0.1:5000/m3/base:v1", digest=DIGEST_A, platform="linux/amd64"),
                        manifest_digest=DIGEST_A, config_digest="sha256:" + hashlib.sha256(raw).hexdigest(),
                        raw_config=raw)


def make_delta() -> Delta:
    layer = b"pretend layer tar bytes"
    return Delta(layer=layer, diff_id="sha256:" + hashlib.sha256(layer).hexdigest(),
                 labels={"io.m3.lock": "abc", "shared": "ours"}, env=["M3_FLAG=new", "EXTRA=1"])


def test_compose_config():
    base, delta = make_base(), make_delta()
    out = compose_config(base, delta, history_comment="0.24.0-m3-0123456789abcdef")
    config = json.loads(out)
    base_cfg = base.config
    assert config["history"][:3] == base_cfg["history"]
    for ours, theirs in zip(config["history"], BASE_HISTORY):
        assert json.dumps(ours, separators=(",", ":")) == json.dumps(theirs, separators=(",", ":"))   # key order kept
    assert len(config["history"]) == len(BASE_HISTORY) + 1
    assert config["history"][-1] == {
        "created": CREATED,
        "created_by": "m3-image: patched vLLM files, MI300X MoE tables, smoke suite (one layer)",
        "comment": "0.24.0-m3-0123456789abcdef",
    }
    assert config["rootfs"] == {"type": "layers", "diff_ids": BASE_DIFF_IDS + [delta.diff_id]}
    assert config["config"]["Labels"] == {"base.label": "kept", "shared": "ours", "io.m3.lock": "abc"}
    assert config["config"]["Env"] == ["PATH=/usr/bin:/bin", "LANG=C.UTF-8", "M3_FLAG=new", "EXTRA=1"]
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
    base = ResolvedBase(image=base.image, manifest_digest=base.manifest_digest, config_digest=base.config_digest,
                        raw_config=json.dumps(raw).encode())
    config = json.loads(compose_config(base, make_delta(), "c"))
    assert config["created"] == "1970-01-01T00:00:00Z"
    assert config["config"] == {"Labels": {"io.m3.lock": "abc", "shared": "ours"}, "Env": ["M3_FLAG=new", "EXTRA=1"]}
    assert config["history"] == [{"created": "1970-01-01T00:00:00Z",
                                  "created_by": "m3-image: patched vLLM files, MI300X MoE tables, smoke suite (one layer)",
                                  "comment": "c"}]


def test_base_is_not_mutated():
    base = make_base()
    raw = base.raw_config
    compose_config(base, make_delta(), "c")
    assert base.raw_config == raw


def test_image_archive():
    base, delta = make_base(), make_delta()
    config = compose_config(base, delta, "c")
    archive, image_id = image_archive(config, base, delta)
    assert image_id == "sha256:" + hashlib.sha256(config).hexdigest()
    hex_id, hex_layer = image_id.split(":")[1], delta.diff_id.split(":")[1]
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == [f"{hex_id}.json", f"{hex_layer}/layer.tar", "manifest.json"]
        for m in members:
            assert m.isfile() and (m.mtime, m.uid, m.gid, m.mode) == (0, 0, 0, 0o644)
        assert tar.extractfile(f"{hex_id}.json").read() == config
        assert tar.extractfile(f"{hex_layer}/layer.tar").read() == delta.layer
        manifest = json.load(tar.extractfile("manifest.json"))
    assert manifest == [{"Config": f"{hex_id}.json", "RepoTags": None,
                         "Layers": ["base/0/layer.tar", "base/1/layer.tar", f"{hex_layer}/layer.tar"]}]
    assert len(manifest[0]["Layers"]) == len(BASE_DIFF_IDS) + 1
    again, again_id = image_archive(compose_config(make_base(), make_delta(), "c"), make_base(), make_delta())
    assert (again, again_id) == (archive, image_id)


def _saved(layer: bytes, diff_ids: list[str] | None = None, layers: int = 1, images: int = 1) -> bytes:
    config = {"config": {"Labels": {"a": "b"}, "Env": ["X=1"]},
              "rootfs": {"type": "layers",
                         "diff_ids": diff_ids if diff_ids is not None else ["sha256:" + hashlib.sha256(layer).hexdigest()]}}
    raw = json.dumps(config).encode()
    manifest = [{"Config": "cfg.json", "RepoTags": ["d:t"], "Layers": ["l/layer.tar"] * layers}] * images
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in (("cfg.json", raw), ("l/layer.tar", layer), ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_read_delta():
    delta = read_delta(_saved(b"layer!"))
    assert delta == Delta(layer=b"layer!", diff_id="sha256:" + hashlib.sha256(b"layer!").hexdigest(),
                          labels={"a": "b"}, env=["X=1"])


@pytest.mark.parametrize("kwargs, needle", [
    ({"layers": 2}, "expected exactly one image with one layer"),
    ({"images": 2}, "expected exactly one image with one layer"),
    ({"diff_ids": ["sha256:" + "0" * 64]}, "does not match its config"),
])
def test_read_delta_refuses(kwargs, needle):
    with pytest.raises(EngineError) as info:
        read_delta(_saved(b"layer!", **kwargs))
    assert "\n" not in str(info.value) and needle in str(info.value)
