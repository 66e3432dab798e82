"""builder.lock: the typed lock writes exactly the bytes the dict code path wrote; content tag
pinned."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml
from lockfixture import (
    FIXED_BUILDER_VERSION,
    FIXED_DIGEST,
    FIXED_TAG,
    FIXTURES,
    TABLE_REL,
    fixed_base,
    fixed_inputs,
    fixed_tree,
)

import builder
from builder.errors import LockError
from builder.hashing import Fingerprint
from builder.lock import (
    HEADER,
    FileChange,
    Lock,
    compute_lock,
    content_digest,
    content_tag,
    lock_diff,
    lock_inputs,
    lock_json,
    read_lock,
    write_lock,
)


@pytest.fixture
def fixed_lock(monkeypatch) -> Lock:
    monkeypatch.setattr(builder, "__version__", FIXED_BUILDER_VERSION)
    return compute_lock(fixed_inputs(), fixed_base(), fixed_tree())


def test_typed_lock_writes_the_bytes_the_dict_code_path_wrote(fixed_lock, tmp_path):
    path = tmp_path / "fixed.lock.yaml"
    write_lock(path, fixed_lock)
    assert path.read_bytes() == (FIXTURES / "fixed.lock.yaml").read_bytes()
    assert lock_json(fixed_lock) == (FIXTURES / "fixed.lock.json").read_bytes()


def test_reading_an_old_lock_and_writing_it_again_is_byte_identical(tmp_path):
    old = read_lock(FIXTURES / "fixed.lock.yaml")
    path = tmp_path / "again.lock.yaml"
    write_lock(path, old)
    assert path.read_bytes() == (FIXTURES / "fixed.lock.yaml").read_bytes()
    assert old.to_doc() == json.loads((FIXTURES / "fixed.lock.json").read_text())


def test_content_tag_of_the_fixed_lock_is_the_committed_value(fixed_lock):
    assert content_digest(fixed_lock) == FIXED_DIGEST
    assert content_tag(fixed_lock) == FIXED_TAG
    assert content_tag(read_lock(FIXTURES / "fixed.lock.yaml")) == FIXED_TAG
    # the document form (what an image's lock.json holds) gives the same tag
    assert content_tag(json.loads(lock_json(fixed_lock))) == FIXED_TAG


def test_missing_files_are_none_in_memory_and_absent_on_disk(fixed_lock):
    assert fixed_lock.files["new.py"] == FileChange(pre=None, post=Fingerprint("e" * 40, "a" * 64))
    assert fixed_lock.files[TABLE_REL].pre is None
    doc = fixed_lock.to_doc()
    assert doc["files"]["new.py"]["pre"] == "absent"
    assert "absent" not in repr(fixed_lock.files)


def test_lock_is_frozen(fixed_lock):
    with pytest.raises(dataclasses.FrozenInstanceError):
        fixed_lock.target = "other"
    with pytest.raises(TypeError):
        fixed_lock.inputs.labels["x"] = "y"
    with pytest.raises(TypeError):
        fixed_lock.files["a.py"] = None


def test_inputs_section_equals_lock_inputs(fixed_lock):
    section = fixed_lock.inputs_section()
    assert section == lock_inputs(fixed_inputs())
    assert section.files is None and not section.base.resolved
    assert list(section.to_doc()) == ["schema", "target", "base", "vllm", "builder", "inputs"]
    assert list(section.to_doc()["base"]) == ["image", "digest", "platform"]


def test_labels_and_env_are_sorted_in_the_lock(fixed_lock):
    assert list(fixed_lock.inputs.labels) == ["b.yes", "org.a", "org.z"]
    assert list(fixed_lock.inputs.env) == ["A", "Z_FLAG"]


def test_diff_of_typed_locks_names_the_changed_key(fixed_lock):
    changed = dataclasses.replace(
        fixed_lock, vllm=dataclasses.replace(fixed_lock.vllm, revision="v0.25.0")
    )
    assert lock_diff(fixed_lock, changed)[2:] == [
        "-vllm.revision: 4a560dd8db67c270f5e2afb614558271b76f2294",
        "+vllm.revision: v0.25.0",
    ]
    assert lock_diff(fixed_lock, fixed_lock) == []
    assert content_tag(changed) != FIXED_TAG


def _doc():
    return yaml.safe_load((FIXTURES / "fixed.lock.yaml").read_text())


def _without(doc, path):
    node = doc
    *parents, last = path.split(".")
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    del node[last]
    return doc


@pytest.mark.parametrize(
    "path, needle",
    [
        ("target", "target: missing"),
        ("base.config", "base.config: missing"),
        ("inputs.patches.0.upstream", "inputs.patches[0].upstream: missing"),
        ("inputs.output.aliases", "inputs.output.aliases: missing"),
        ("files.a.py.post", "files.a.py.post: missing"),
    ],
)
def test_a_malformed_lock_is_one_line_naming_the_key(tmp_path, path, needle):
    doc = _doc()
    if path.startswith("files.a.py"):
        del doc["files"]["a.py"]["post"]
    else:
        _without(doc, path)
    file = tmp_path / "bad.lock.yaml"
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(LockError) as info:
        read_lock(file)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{file}: {needle}"), message


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (
            lambda d: d["inputs"].__setitem__("patches", {"x": 1}),
            "inputs.patches: expected a list, got dict",
        ),
        (lambda d: d["vllm"].__setitem__("version", 24), "vllm.version: expected a string, got 24"),
        (
            lambda d: d["files"]["a.py"].__setitem__("pre", "gone"),
            "files.a.py.pre: expected a mapping, got str",
        ),
    ],
)
def test_a_mistyped_lock_is_one_line_naming_the_key(tmp_path, mutate, needle):
    doc = _doc()
    mutate(doc)
    file = tmp_path / "bad.lock.yaml"
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(LockError) as info:
        read_lock(file)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_a_lock_without_files_reads_as_the_engine_free_section(tmp_path):
    doc = _doc()
    del doc["files"]
    file = tmp_path / "partial.lock.yaml"
    file.write_text(HEADER + yaml.safe_dump(doc, sort_keys=False))
    assert read_lock(file).files is None


def test_builder_lock_can_replace_a_malformed_lock(tmp_path):
    """`builder lock` diffs against the previous file; a key the typed reader refuses must not
    stop it from writing a good lock (only the schema is checked there)."""
    from builder.lock import read_lock_document

    doc = _doc()
    del doc["inputs"]["smoke"]
    file = tmp_path / "old.lock.yaml"
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(LockError):
        read_lock(file)
    assert read_lock_document(file) == doc
    assert "-inputs.smoke.sha256: " + "7" * 64 in lock_diff(_doc(), read_lock_document(file))
