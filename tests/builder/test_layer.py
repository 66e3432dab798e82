"""builder.layer: the canonical delta layer, byte for byte, whatever wrote the tree (no engine)."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile

import pytest

from builder.errors import BuilderError
from builder.layer import BLOCK, canonical_layer, header, tar_of

MTIME = 1_700_000_000


def make_tree(root, order=("b", "a")):
    for name in order:
        (root / "opt" / name).mkdir(parents=True, exist_ok=True)
        (root / "opt" / name / "f.py").write_bytes(f"# {name}\n".encode())
    tool = root / "usr" / "bin" / "tool"
    tool.parent.mkdir(parents=True)
    tool.write_bytes(b"#!/bin/sh\n")
    tool.chmod(0o755)
    return root


def test_form_of_every_header(tmp_path):
    layer = canonical_layer(make_tree(tmp_path), MTIME)
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == [
        "opt",
        "opt/a",
        "opt/a/f.py",
        "opt/b",
        "opt/b/f.py",
        "usr",
        "usr/bin",
        "usr/bin/tool",
    ]
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", MTIME)}
    assert {m.name: m.mode for m in members if m.isfile()} == {
        "opt/a/f.py": 0o644,
        "opt/b/f.py": 0o644,
        "usr/bin/tool": 0o755,
    }
    assert {m.mode for m in members if m.isdir()} == {0o755}
    assert not [m for m in members if m.pax_headers]
    # raw bytes: ustar magic, permission bits only (no 040000 / 0100000 type bits), no padding
    # record
    first = layer[:BLOCK]
    assert first[:4] == b"opt/" and first[257:265] == b"ustar\x0000"
    assert first[100:108] == b"0000755\0" and first[265:329] == b"\0" * 64
    assert len(layer) % BLOCK == 0 and layer.endswith(b"\0" * 1024)
    assert len(layer) == 8 * BLOCK + 3 * BLOCK + 2 * BLOCK  # 8 headers, 3 data blocks, end


def test_same_bytes_whatever_the_disk_says(tmp_path):
    one = canonical_layer(make_tree(tmp_path / "one"), MTIME)
    two_root = make_tree(tmp_path / "two", order=("a", "b"))  # other creation order
    for dirpath, _dirnames, filenames in os.walk(two_root):  # other mtimes and dir modes
        os.chmod(dirpath, 0o700)
        for name in filenames:
            os.utime(os.path.join(dirpath, name), (12345, 12345))
    assert canonical_layer(two_root, MTIME) == one
    assert (
        hashlib.sha256(one).hexdigest()
        == hashlib.sha256(canonical_layer(tmp_path / "one", MTIME)).hexdigest()
    )
    assert canonical_layer(tmp_path / "one", MTIME + 1) != one  # mtime comes from the inputs


def test_long_paths_use_the_ustar_prefix(tmp_path):
    name = (
        "usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/fused_moe/configs/"
        "E=128,N=384,device_name=AMD_Instinct_MI300X,dtype=fp8_w8a8,block_shape=[128,128].json"
    )
    block = header(name, size=3, mode=0o644, mtime=0, typeflag=b"0")
    assert block[345 : 345 + 85].rstrip(b"\0").decode() == name.rsplit("/", 1)[0]
    with tarfile.open(fileobj=io.BytesIO(block + b"abc".ljust(BLOCK, b"\0") + b"\0" * 1024)) as tar:
        member = tar.next()
        assert (
            member.name == name
            and tar.extractfile(member).read() == b"abc"
            and not member.pax_headers
        )


@pytest.mark.parametrize(
    "name, needle",
    [
        ("x" * 101, "path too long for a ustar header"),
        ("d/" + "x" * 160 + "/f", "path too long for a ustar header"),
        ("caf\u00e9.py", "only ASCII paths"),
    ],
)
def test_refuses_what_ustar_cannot_hold(name, needle):
    with pytest.raises(BuilderError) as caught:
        header(name, size=0, mode=0o644, mtime=0, typeflag=b"0")
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_refuses_symlinks(tmp_path):
    (tmp_path / "t").write_text("x")
    (tmp_path / "link").symlink_to("t")
    with pytest.raises(BuilderError) as caught:
        canonical_layer(tmp_path, 0)
    assert (
        str(caught.value)
        == "layer: link: only regular files and directories go into the delta layer"
    )


def test_tar_of_keeps_order_and_form():
    data = tar_of([("b", b"2"), ("a", b"1")], mtime=7)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert [(m.name, m.mtime, m.mode, m.uname) for m in tar.getmembers()] == [
            ("b", 7, 0o644, ""),
            ("a", 7, 0o644, ""),
        ]
