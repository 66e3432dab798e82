"""builder.lock: content tag/digest stability, lock file round trip, one-line errors, drift
diffs."""

from __future__ import annotations

import copy
import hashlib
import json

import pytest
from m3_builder_testlib import DIGEST_A, DIGEST_B, TABLE_NAME, assert_one_line, minimal_doc

import builder
from builder.errors import LockError
from builder.inputs import collect_inputs
from builder.lock import (
    HEADER,
    Lock,
    content_digest,
    content_tag,
    inputs_section,
    lock_diff,
    lock_inputs,
    read_lock,
    require_match,
    write_lock,
)
from builder.spec import load_spec

SHA = {c: c * 64 for c in "0123456789abcdef"}


def sample_lock() -> dict:
    return {
        "schema": 1,
        "target": "t",
        "base": {
            "image": "127.0.0.1:5000/m3/base:v1",
            "digest": DIGEST_A,
            "platform": "linux/amd64",
            "manifest": DIGEST_A,
            "config": DIGEST_B,
            "created": "2025-01-02T03:04:05Z",
        },
        "vllm": {
            "root": "/usr/lib/python3/dist-packages/vllm",
            "version": "0.24.0",
            "revision": "v0.24.0",
        },
        "builder": {"version": "0.1.0", "sha256": SHA["1"]},
        "inputs": {
            "series": {"file": "patches/series", "sha256": SHA["2"]},
            "patches": [
                {"file": "patches/0001-a.patch", "sha256": SHA["3"], "upstream": "vLLM #1"},
                {"file": "patches/0002-b.patch", "sha256": SHA["4"], "upstream": ""},
            ],
            "tables": [
                {
                    "file": f"tuning/{TABLE_NAME}",
                    "sha256": SHA["5"],
                    "installs_as": f"configs/{TABLE_NAME}",
                }
            ],
            "template": {"file": "dockerfiles/delta.Dockerfile.j2", "sha256": SHA["6"]},
            "smoke": {"sha256": SHA["7"]},
            "output": {"repository": "127.0.0.1:5000/m3/out", "aliases": ["latest"]},
            "labels": {"org.example.title": "tiny"},
            "env": {"M3_FLAG": "1"},
        },
        "files": {
            "a.py": {
                "pre": {"git_blob": "c" * 40, "sha256": SHA["8"]},
                "post": {"git_blob": "d" * 40, "sha256": SHA["9"]},
            },
            "new.py": {"pre": "absent", "post": {"git_blob": "e" * 40, "sha256": SHA["a"]}},
        },
    }


def reorder(doc):
    """The same document with every mapping's keys in reverse order."""
    if isinstance(doc, dict):
        return {k: reorder(doc[k]) for k in reversed(list(doc))}
    if isinstance(doc, list):
        return [reorder(v) for v in doc]
    return doc


def test_content_digest_is_sha256_of_canonical_json():
    lock = sample_lock()
    canonical = json.dumps(lock, sort_keys=True, separators=(",", ":")).encode()
    assert content_digest(lock) == hashlib.sha256(canonical).hexdigest()
    # pinned: a change to the canonical form would silently re-tag every image
    assert content_digest(lock) == GOLDEN_DIGEST
    assert content_tag(lock) == f"0.24.0-m3-{GOLDEN_DIGEST[:16]}"


GOLDEN_DIGEST = "3d1df5fd7c73b637c2bbd0679efecf2dc3cfc3a9ac1563a3f75f5ab63d2aeeb9"


def test_content_tag_ignores_key_order():
    lock = sample_lock()
    shuffled = reorder(lock)
    assert list(shuffled) != list(lock)
    assert content_digest(shuffled) == content_digest(lock)
    assert content_tag(shuffled) == content_tag(lock)


@pytest.mark.parametrize(
    "path, value",
    [
        ("inputs.patches.0.sha256", SHA["f"]),
        ("inputs.patches.1.upstream", "vLLM #2"),
        ("inputs.tables.0.sha256", SHA["f"]),
        ("base.digest", DIGEST_B),
        ("base.config", DIGEST_A),
        ("base.created", "2025-01-02T03:04:06Z"),
        ("builder.sha256", SHA["f"]),
        ("inputs.template.sha256", SHA["f"]),
        ("inputs.smoke.sha256", SHA["f"]),
        ("inputs.env.M3_FLAG", "2"),
        ("inputs.output.aliases.0", "stable"),
        ("files.a.py.post.sha256", SHA["f"]),
    ],
)
def test_content_tag_changes_with_any_leaf(path, value):
    lock = sample_lock()
    changed = copy.deepcopy(lock)
    node = changed
    keys = path.split(".")
    # "files.a.py..." : join the file name back
    if keys[0] == "files":
        keys = ["files", "a.py", *keys[3:]]
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    last = keys[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        assert node[last] != value
        node[last] = value
    assert content_digest(changed) != content_digest(lock)
    assert content_tag(changed) != content_tag(lock)
    assert content_tag(changed).startswith("0.24.0-m3-")


def test_content_tag_strips_local_version():
    lock = sample_lock()
    lock["vllm"]["version"] = "0.22.1rc1.dev490+g4a560dd8d"
    assert content_tag(lock) == f"0.22.1rc1.dev490-m3-{content_digest(lock)[:16]}"
    assert len(content_tag(lock).rsplit("-", 1)[1]) == 16


def test_write_then_read_round_trips(tmp_path):
    lock = sample_lock()
    path = tmp_path / "locks" / "t.lock.yaml"
    write_lock(path, Lock.from_doc(lock))
    text = path.read_text()
    assert text.startswith(HEADER)
    assert read_lock(path).to_doc() == lock
    assert list(read_lock(path).to_doc()) == list(lock)  # order kept (sort_keys=False)
    assert content_tag(read_lock(path)) == content_tag(lock)
    assert sorted(p.name for p in path.parent.iterdir()) == ["t.lock.yaml"]  # no .tmp left behind
    write_lock(path, read_lock(path))
    assert path.read_text() == text  # byte-stable


def test_round_trip_keeps_ambiguous_strings(tmp_path):
    lock = sample_lock()
    lock["inputs"]["env"] = {"A": "1", "B": "true", "C": "null", "D": "2025-01-01", "E": "0755"}
    path = tmp_path / "l.yaml"
    write_lock(path, Lock.from_doc(lock))
    assert read_lock(path).to_doc()["inputs"]["env"] == lock["inputs"]["env"]


def test_read_lock_missing(tmp_path):
    path = tmp_path / "nope.lock.yaml"
    with pytest.raises(LockError) as info:
        read_lock(path)
    assert_one_line(info.value, str(path), "no lock", "python -m builder lock")


@pytest.mark.parametrize(
    "text, needles",
    [
        ("schema: 1\nbase: [\n", ["not valid YAML"]),
        ("schema: 2\ntarget: t\n", ["schema: expected 1, got 2"]),
        ("target: t\n", ["schema: expected 1, got None"]),
        ("- 1\n- 2\n", ["schema: expected 1, got [1, 2]"]),
        ("", ["schema: expected 1, got None"]),
    ],
    ids=["bad-yaml", "schema-2", "no-schema", "list", "empty"],
)
def test_read_lock_bad(tmp_path, text, needles):
    path = tmp_path / "t.lock.yaml"
    path.write_text(text)
    with pytest.raises(LockError) as info:
        read_lock(path)
    assert_one_line(info.value, str(path), *needles)


def test_read_lock_not_text_or_not_a_file(tmp_path):
    path = tmp_path / "t.lock.yaml"
    path.write_bytes(b"\xff\xfe\x00schema")
    with pytest.raises(LockError) as info:
        read_lock(path)
    assert_one_line(info.value, str(path))
    with pytest.raises(LockError) as info:
        read_lock(tmp_path)
    assert_one_line(info.value, str(tmp_path), "cannot read the lock")


def test_require_match_passes_on_equal(tmp_path):
    """Key order is layout: a re-ordered lock is the same lock (the content tag agrees)."""
    require_match(tmp_path / "l.yaml", sample_lock(), sample_lock())
    require_match(tmp_path / "l.yaml", sample_lock(), reorder(sample_lock()))
    assert lock_diff(sample_lock(), reorder(sample_lock())) == []


def test_require_match_diff_lists_exactly_the_changed_keys(tmp_path):
    locked = sample_lock()
    current = copy.deepcopy(locked)
    current["base"]["digest"] = DIGEST_B
    current["inputs"]["patches"][1]["sha256"] = SHA["f"]
    current["inputs"]["env"]["NEW"] = "x"
    path = tmp_path / "t.lock.yaml"
    with pytest.raises(LockError) as info:
        require_match(path, locked, current)
    assert_one_line(
        info.value, str(path), "inputs drifted from the lock (3 changed)", "python -m builder lock"
    )
    assert info.value.details == [
        "--- lock",
        "+++ working tree",
        f"-base.digest: {DIGEST_A}",
        f"+base.digest: {DIGEST_B}",
        "+inputs.env.NEW: x",
        f"-inputs.patches[1].sha256: {SHA['4']}",
        f"+inputs.patches[1].sha256: {SHA['f']}",
    ]


def test_require_match_what_and_removed_key(tmp_path):
    locked = sample_lock()
    current = copy.deepcopy(locked)
    del current["files"]["new.py"]
    with pytest.raises(LockError) as info:
        require_match(tmp_path / "l", locked, current, what="base or patched files")
    assert_one_line(info.value, "base or patched files drifted from the lock (3 changed)")
    assert info.value.details == [
        "--- lock",
        "+++ working tree",
        f"-files.new.py.post.git_blob: {'e' * 40}",
        f"-files.new.py.post.sha256: {SHA['a']}",
        "-files.new.py.pre: absent",
    ]


@pytest.mark.parametrize(
    "old, new, lines",
    [
        ({"a": 1}, {"a": "1"}, ["-a: 1", '+a: "1"']),
        ({"a": None}, {"a": "None"}, ["-a: null", '+a: "None"']),
        ({"a": {}}, {"a": []}, ["-a: {}", "+a: []"]),
        ({"a": {"b": 1}}, {"a": {}}, ["-a.b: 1", "+a: {}"]),
    ],
)
def test_type_only_drift_is_never_an_empty_diff(tmp_path, old, new, lines):
    assert content_digest(old) != content_digest(new)
    assert lock_diff(old, new)[2:] == lines
    with pytest.raises(LockError):
        require_match(tmp_path / "l", old, new)


def test_lock_inputs_from_a_tmp_project(write_spec, project):
    target = load_spec(write_spec(minimal_doc())).target("t")
    inputs = collect_inputs(target)
    section = lock_inputs(inputs).to_doc()
    assert list(section) == ["schema", "target", "base", "vllm", "builder", "inputs"]
    assert section["base"] == {
        "image": "127.0.0.1:5000/m3/base:v1",
        "digest": DIGEST_A,
        "platform": "linux/amd64",
    }
    assert section["builder"]["version"] == builder.__version__
    assert section["inputs"]["series"] == {
        "file": "patches/series",
        "sha256": hashlib.sha256((project / "patches/series").read_bytes()).hexdigest(),
    }
    assert section["inputs"]["patches"] == [
        {
            "file": "patches/0001-a.patch",
            "sha256": hashlib.sha256((project / "patches/0001-a.patch").read_bytes()).hexdigest(),
            "upstream": "",
        }
    ]
    assert section["inputs"]["tables"] == [
        {
            "file": f"tuning/{TABLE_NAME}",
            "sha256": hashlib.sha256((project / "tuning" / TABLE_NAME).read_bytes()).hexdigest(),
            "installs_as": f"model_executor/layers/fused_moe/configs/{TABLE_NAME}",
        }
    ]
    assert section["inputs"]["labels"] == {"org.example.title": "tiny"}
    assert section["inputs"]["env"] == {"M3_FLAG": "1"}
    # a full lock's engine-free part equals what lock_inputs recomputes
    full = {**copy.deepcopy(section), "files": {}}
    full["base"] = {**section["base"], "manifest": DIGEST_A, "config": DIGEST_B, "created": "x"}
    assert inputs_section(Lock.from_doc(full)).to_doc() == section
    # editing the patch is drift
    (project / "patches" / "0001-a.patch").write_text(
        (project / "patches" / "0001-a.patch").read_text() + "\n"
    )
    with pytest.raises(LockError) as info:
        require_match(target.lock_file, section, lock_inputs(collect_inputs(target)))
    assert [line.split(":")[0] for line in info.value.details[2:]] == [
        "-inputs.patches[0].sha256",
        "+inputs.patches[0].sha256",
    ]
