"""builder.spec.load_spec: valid specs load into dataclasses; every bad input is one line naming
file, key, value."""

from __future__ import annotations

import copy
from pathlib import Path, PurePosixPath

import pytest
from m3_builder_testlib import DIGEST_A, TABLE_NAME, assert_one_line, minimal_doc

from builder.errors import SpecError
from builder.spec import BaseImage, Spec, Table, Target, UnpinnedTarget, load_spec


def test_minimal_spec_loads_into_dataclasses(write_spec, project):
    path = write_spec(minimal_doc())
    spec = load_spec(path)
    assert isinstance(spec, Spec)
    assert spec.file == path
    assert spec.default_target == "t"
    assert list(spec.targets) == ["t"]
    target = spec.target(None)
    assert target is spec.target("t")
    assert target == Target(
        name="t",
        spec_file=path,
        description="tiny target",
        base=BaseImage(
            image="127.0.0.1:5000/m3/base:v1",
            digest=DIGEST_A,
            platform="linux/amd64",
            digest_file=None,
        ),
        vllm_root=PurePosixPath("/usr/lib/python3/dist-packages/vllm"),
        python="/usr/bin/python3",
        vllm_version="0.24.0",
        vllm_revision="v0.24.0",
        series=project / "patches" / "series",
        expect={"a.py": "0123abc", "new.py": None},  # "absent" in YAML is None in memory
        tables=(Table(source=project / "tuning" / TABLE_NAME, name=TABLE_NAME),),
        repository="127.0.0.1:5000/m3/out",
        aliases=("latest", "v1.0"),
        labels={"org.example.title": "tiny"},
        env={"M3_FLAG": "1"},
        lock_file=project / "locks" / "t.lock.yaml",
    )
    assert target.project_root == project
    assert target.base.name == "127.0.0.1:5000/m3/base"
    assert target.base.reference == f"127.0.0.1:5000/m3/base@{DIGEST_A}"


def test_optional_keys_default(write_spec):
    doc = minimal_doc()
    t = doc["targets"]["t"]
    for key in ("description", "labels", "env"):
        del t[key]
    del t["base"]["platform"]
    del t["vllm"]["revision"]
    del t["output"]["aliases"]
    target = load_spec(write_spec(doc)).target("t")
    assert (target.description, target.labels, target.env, target.aliases) == ("", {}, {}, ())
    assert target.base.platform == "linux/amd64"
    assert target.vllm_revision == "unknown"


def test_digest_file_pin_is_read(write_spec, project):
    doc = minimal_doc()
    del doc["targets"]["t"]["base"]["digest"]
    doc["targets"]["t"]["base"]["digest_file"] = "pins/t.digest"
    (project / "pins").mkdir()
    (project / "pins" / "t.digest").write_text(DIGEST_A + "\n")
    base = load_spec(write_spec(doc)).target("t").base
    assert base.digest == DIGEST_A
    assert base.digest_file == project / "pins" / "t.digest"


def test_missing_digest_file_gives_unpinned_target(write_spec, project):
    doc = minimal_doc()
    base = doc["targets"]["t"]["base"]
    del base["digest"]
    base["image"] = "docker.io/vllm/vllm-openai-rocm:minimax-m3"
    base["digest_file"] = "pins/t.digest"
    path = write_spec(doc)
    spec = load_spec(path)  # loading is fine: `builder pin` needs the target
    unpinned = spec.targets["t"]
    assert isinstance(unpinned, UnpinnedTarget)
    assert unpinned.name == "t"
    assert unpinned.image == "docker.io/vllm/vllm-openai-rocm:minimax-m3"
    assert unpinned.digest_file == project / "pins" / "t.digest"
    assert_one_line(
        SpecError(unpinned.reason),
        str(path),
        "targets.t.base.image",
        "pins/t.digest",
        "docker.io/vllm/vllm-openai-rocm:minimax-m3",
        "python -m builder pin t",
    )
    with pytest.raises(SpecError) as info:
        spec.target("t")
    assert str(info.value) == unpinned.reason
    with pytest.raises(SpecError) as info:
        spec.target(None)
    assert str(info.value) == unpinned.reason


def test_unknown_target_name_is_refused(write_spec):
    path = write_spec(minimal_doc())
    with pytest.raises(SpecError) as info:
        load_spec(path).target("nope")
    assert_one_line(info.value, str(path), "targets", "'nope'", "have: t")


def _set(path: str, value):
    """A mutator setting doc[a][b]... = value (value None with delete=True removes)."""

    def mutate(doc):
        keys = path.split("/")
        node = doc
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        last = keys[-1]
        if value is _DELETE:
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


_DELETE = object()
T = "targets/t"


def _rename(path: str, old: str, new: str):
    def mutate(doc):
        node = doc
        for k in path.split("/") if path else []:
            node = node[k]
        node[new] = node.pop(old)

    return mutate


def _chain(*mutators):
    def mutate(doc):
        for m in mutators:
            m(doc)

    return mutate


BAD_SPECS = [
    # (id, mutator, needles that must all appear, besides the spec file)
    (
        "unknown-top-level-key",
        _set("bogus", 1),
        ["bogus: unknown key", "allowed: default_target, definitions, schema, targets"],
    ),
    (
        "unknown-target-key",
        _rename(T, "base", "bsae"),
        ["targets.t.bsae: unknown key", "allowed: base,"],
    ),
    ("unknown-base-key", _set(f"{T}/base/tag", "v1"), ["targets.t.base.tag: unknown key"]),
    (
        "missing-required-key",
        _set(f"{T}/lock", _DELETE),
        ["targets.t.lock: required key is missing"],
    ),
    (
        "tag-only-base",
        _set(f"{T}/base/digest", _DELETE),
        [
            "targets.t.base.image",
            "'127.0.0.1:5000/m3/base:v1' is a mutable tag",
            "base.digest or base.digest_file",
        ],
    ),
    (
        "digest-in-reference",
        _set(f"{T}/base/image", f"127.0.0.1:5000/m3/base:v1@{DIGEST_A}"),
        [
            "targets.t.base.image",
            f"'127.0.0.1:5000/m3/base:v1@{DIGEST_A}'",
            "give the digest in base.digest",
        ],
    ),
    (
        "bad-image-reference",
        _set(f"{T}/base/image", "Upper/Case:v1"),
        ["targets.t.base.image", "'Upper/Case:v1' is not a valid image reference"],
    ),
    (
        "malformed-digest",
        _set(f"{T}/base/digest", "sha256:abc"),
        ["targets.t.base.digest", "'sha256:abc' is not a valid sha256 digest"],
    ),
    (
        "uppercase-digest",
        _set(f"{T}/base/digest", "sha256:" + "A" * 64),
        ["targets.t.base.digest", "'sha256:" + "A" * 64 + "'"],
    ),
    (
        "digest-and-digest-file",
        _set(f"{T}/base/digest_file", "pins/x"),
        ["targets.t.base", "give either digest or digest_file, not both"],
    ),
    (
        "bad-platform",
        _set(f"{T}/base/platform", "amd64"),
        ["targets.t.base.platform", "'amd64' is not a valid platform (os/arch)"],
    ),
    (
        "missing-series",
        _set(f"{T}/series", "patches/nope"),
        ["targets.t.series", "file 'patches/nope' does not exist"],
    ),
    (
        "series-dotdot",
        _set(f"{T}/series", "../proj/patches/series"),
        ["targets.t.series", "'../proj/patches/series' must be a relative path inside"],
    ),
    (
        "series-absolute",
        _set(f"{T}/series", "/etc/passwd"),
        ["targets.t.series", "'/etc/passwd' must be a relative path inside"],
    ),
    (
        "missing-table",
        _set(f"{T}/tables/0", "tuning/nope.json"),
        ["targets.t.tables[0]", "file 'tuning/nope.json' does not exist"],
    ),
    (
        "tables-not-a-list",
        _set(f"{T}/tables", "tuning/x.json"),
        ["targets.t.tables", "expected a list", "'tuning/x.json'"],
    ),
    (
        "vllm-root-relative",
        _set(f"{T}/vllm/root", "usr/lib/vllm"),
        ["targets.t.vllm.root", "'usr/lib/vllm' must be an absolute path ending in /vllm"],
    ),
    (
        "vllm-root-not-vllm",
        _set(f"{T}/vllm/root", "/usr/lib/torch"),
        ["targets.t.vllm.root", "'/usr/lib/torch' must be an absolute path ending in /vllm"],
    ),
    (
        "vllm-root-dotdot",
        _set(f"{T}/vllm/root", "/usr/../vllm"),
        ["targets.t.vllm.root", "'/usr/../vllm'"],
    ),
    (
        "expect-bad-blob",
        _set(f"{T}/expect/a.py", "xyz123g"),
        ["targets.t.expect.a.py", "'xyz123g' is not a git blob id"],
    ),
    ("expect-short-blob", _set(f"{T}/expect/a.py", "abc12"), ["targets.t.expect.a.py", "'abc12'"]),
    (
        "expect-dotdot",
        lambda doc: doc["targets"]["t"]["expect"].update({"../x.py": "absent"}),
        ["targets.t.expect.../x.py", "'../x.py' must be relative to vllm.root"],
    ),
    (
        "label-newline",
        _set(f"{T}/labels/org.example.title", "a\nLABEL evil=1"),
        [
            "targets.t.labels.org.example.title",
            "control characters are not allowed",
            repr("a\nLABEL evil=1"),
        ],
    ),
    (
        "label-key-invalid",
        _set(f"{T}/labels/Org.Example", "x"),
        ["targets.t.labels", "'Org.Example' is not a valid label key"],
    ),
    (
        "env-key-invalid",
        _set(f"{T}/env/1BAD-KEY", "x"),
        ["targets.t.env", "'1BAD-KEY' is not a valid environment variable name"],
    ),
    ("env-value-tab", _set(f"{T}/env/M3_FLAG", "a\tb"), ["targets.t.env.M3_FLAG", repr("a\tb")]),
    (
        "repository-with-tag",
        _set(f"{T}/output/repository", "127.0.0.1:5000/m3/out:v1"),
        [
            "targets.t.output.repository",
            "'127.0.0.1:5000/m3/out:v1': give a repository without tag or digest",
        ],
    ),
    (
        "single-name-repository-with-numeric-tag",
        _set(f"{T}/output/repository", "out:5"),
        ["targets.t.output.repository", "'out:5'"],
    ),
    (
        "repository-with-digest",
        _set(f"{T}/output/repository", f"127.0.0.1:5000/m3/out@{DIGEST_A}"),
        ["targets.t.output.repository", f"'127.0.0.1:5000/m3/out@{DIGEST_A}'"],
    ),
    (
        "alias-invalid",
        _set(f"{T}/output/aliases/1", "bad tag"),
        ["targets.t.output.aliases[1]", "'bad tag' is not a valid tag"],
    ),
    (
        "alias-leading-dash",
        _set(f"{T}/output/aliases/0", "-x"),
        ["targets.t.output.aliases[0]", "'-x'"],
    ),
    (
        "aliases-not-a-list",
        _set(f"{T}/output/aliases", "latest"),
        ["targets.t.output.aliases", "expected a list"],
    ),
    (
        "default-target-missing",
        _set("default_target", "nope"),
        ["default_target", "'nope' is not one of the targets (t)"],
    ),
    (
        "unsupported-schema",
        _set("schema", 2),
        ["schema", "unsupported schema 2 (this builder reads 1)"],
    ),
    ("schema-true", _set("schema", True), ["schema", "unsupported schema True"]),
    ("schema-string", _set("schema", "1"), ["schema", "unsupported schema '1'"]),
    (
        "target-name-invalid",
        _rename("targets", "t", "T_bad"),
        ["targets.T_bad", "'T_bad' is not a valid target name"],
    ),
    ("no-targets", _set("targets", {}), ["targets", "no targets defined"]),
    ("target-not-mapping", _set(T, ["x"]), ["targets.t", "expected a mapping, got list"]),
]


@pytest.mark.parametrize("mutate, needles", [pytest.param(m, n, id=i) for i, m, n in BAD_SPECS])
def test_bad_spec_is_one_line_error(write_spec, mutate, needles):
    doc = copy.deepcopy(minimal_doc())
    mutate(doc)
    path = write_spec(doc)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert_one_line(info.value, str(path), *needles)
    assert str(info.value).startswith(f"{path}: ")


def test_duplicate_tables_are_named(write_spec, project):
    (project / "tuning2").mkdir()
    (project / "tuning2" / TABLE_NAME).write_text("{}\n")
    doc = minimal_doc()
    doc["targets"]["t"]["tables"].append(f"tuning2/{TABLE_NAME}")
    path = write_spec(doc)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert_one_line(
        info.value,
        str(path),
        "targets.t.tables",
        "two tables install under the same name",
        repr(TABLE_NAME),
    )


@pytest.mark.parametrize(
    "content",
    ["sha256:zz\n", "", DIGEST_A + " extra\n", "sha256:" + "a" * 63 + "\n", "\xff\xfe binary"],
    ids=["bad-hex", "empty", "trailing-junk", "short", "binary"],
)
def test_bad_digest_file_content(write_spec, project, content):
    doc = minimal_doc()
    del doc["targets"]["t"]["base"]["digest"]
    doc["targets"]["t"]["base"]["digest_file"] = "pins/t.digest"
    (project / "pins").mkdir()
    pin = project / "pins" / "t.digest"
    if content.startswith("\xff"):
        pin.write_bytes(b"\xff\xfe binary")
    else:
        pin.write_text(content)
    path = write_spec(doc)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert_one_line(info.value, str(pin), "targets.t.base.digest_file", "is not a sha256 digest")
    if not content.startswith("\xff"):
        assert repr(content.strip()) in str(info.value)


def test_digest_file_outside_project_is_refused(write_spec, project):
    doc = minimal_doc()
    del doc["targets"]["t"]["base"]["digest"]
    doc["targets"]["t"]["base"]["digest_file"] = "../outside.digest"
    (project.parent / "outside.digest").write_text(DIGEST_A + "\n")
    path = write_spec(doc)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert_one_line(info.value, str(path), "targets.t.base.digest_file", "'../outside.digest'")


def test_numeric_tag_on_single_component_name(write_spec):
    """``ubuntu:22`` is a name plus tag, not a host:port (a port needs a path after it)."""
    doc = minimal_doc()
    doc["targets"]["t"]["base"]["image"] = "ubuntu:22"
    base = load_spec(write_spec(doc)).target("t").base
    assert base.name == "ubuntu"
    assert base.reference == f"ubuntu@{DIGEST_A}"


def test_registry_port_is_not_a_tag(write_spec):
    doc = minimal_doc()
    doc["targets"]["t"]["base"]["image"] = "localhost:5000/base"
    doc["targets"]["t"]["output"]["repository"] = "localhost:5000/out"
    target = load_spec(write_spec(doc)).target("t")
    assert target.base.name == "localhost:5000/base"
    assert target.repository == "localhost:5000/out"


def test_invalid_yaml_names_line(write_spec):
    path = write_spec("schema: 1\ndefault_target: t\ntargets:\n\tt: {}\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert_one_line(info.value, str(path), "line 4", "invalid YAML")


def test_unclosed_flow_yaml_names_line(write_spec):
    path = write_spec("schema: 1\ndefault_target: t\ntargets: {t: [1, 2\nfoo: bar\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    text = assert_one_line(info.value, str(path), "invalid YAML")
    assert "line 4" in text or "line 5" in text, text


@pytest.mark.parametrize(
    "text, needle",
    [("", "expected a mapping, got NoneType"), ("- 1\n- 2\n", "expected a mapping, got list")],
)
def test_top_level_not_a_mapping(write_spec, text, needle):
    path = write_spec(text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert_one_line(info.value, str(path), needle)


def test_missing_spec_file(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert_one_line(info.value, str(path), "cannot read spec", "No such file")


def test_repo_image_yaml_loads():
    """The committed spec parses (read-only); its production target is unpinned or pinned, never
    half-valid."""
    repo = Path(__file__).resolve().parents[2]
    spec = load_spec(repo / "image.yaml")
    assert spec.default_target == "mi300x"
    assert set(spec.targets) == {
        "mi300x",
        "standin",
        "standin-4a560dd",
        "mi300x-v0-30",
        "mi300x-v0-34",
        "standin-v0-30",
        "standin-v0-34",
    }
    for target in spec.targets.values():
        assert isinstance(target, (Target, UnpinnedTarget))
