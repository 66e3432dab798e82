"""Shared definitions (``definitions:`` + ``extends:``): said once, used verbatim, refused when
ambiguous."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from m3_builder_testlib import assert_one_line, minimal_doc

from builder.errors import SpecError
from builder.spec import Target, UnpinnedTarget, load_spec

REPO = Path(__file__).resolve().parents[2]
PER_BASE = {"base", "output", "lock", "description"}  # what a target may say for itself


def split_doc() -> dict:
    """minimal_doc() with everything but base/vllm.root/output/lock in a definition ``d``."""
    doc = minimal_doc()
    t = doc["targets"]["t"]
    shared = {k: t.pop(k) for k in ("series", "expect", "tables", "labels", "env")}
    shared["vllm"] = {k: v for k, v in t["vllm"].items() if k != "root"}
    t["vllm"] = {"root": t["vllm"]["root"]}
    t["extends"] = "d"
    doc["definitions"] = {"d": shared}
    return doc


def test_a_target_extending_a_definition_is_the_same_target(write_spec):
    plain = load_spec(write_spec(minimal_doc())).target("t")
    spec = load_spec(write_spec(split_doc()))
    assert spec.target("t") == plain
    assert spec.resolved["t"] == {k: v for k, v in minimal_doc()["targets"]["t"].items()}


def test_definitions_chain(write_spec):
    doc = split_doc()
    d = doc["definitions"]["d"]
    doc["definitions"]["g"] = {"tables": d.pop("tables"), "labels": d.pop("labels")}
    d["extends"] = "g"
    assert load_spec(write_spec(doc)).target("t") == load_spec(write_spec(minimal_doc())).target(
        "t"
    )


def _error(write_spec, doc) -> str:
    path = write_spec(doc)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    return assert_one_line(info.value, str(path))


def test_unknown_definition(write_spec):
    doc = split_doc()
    doc["targets"]["t"]["extends"] = "nope"
    text = _error(write_spec, doc)
    assert text.endswith(
        "image.yaml: targets.t.extends: unknown definition 'nope' (definitions: d)"
    )


def test_cycle(write_spec):
    doc = split_doc()
    doc["definitions"]["d"]["extends"] = "e"
    doc["definitions"]["e"] = {"extends": "d"}
    text = _error(write_spec, doc)
    assert text.endswith(
        "definitions.e.extends: definitions extend each other in a cycle: d -> e -> d"
    )


def test_self_cycle(write_spec):
    doc = split_doc()
    doc["definitions"]["d"]["extends"] = "d"
    assert _error(write_spec, doc).endswith(
        "definitions.d.extends: definitions extend each other in a cycle: d -> d"
    )


@pytest.mark.parametrize(
    "key, value, where",
    [
        ("series", "patches/series", "targets.t.series: also set by definitions.d.series"),
        (
            "vllm",
            {"root": "/usr/lib/python3/dist-packages/vllm", "version": "9.9"},
            "targets.t.vllm.version: also set by definitions.d.vllm.version",
        ),
        (
            "expect",
            {"a.py": "0123abc"},
            "targets.t.expect.a.py: also set by definitions.d.expect.a.py",
        ),
        ("labels", "not-a-mapping", "targets.t.labels: also set by definitions.d.labels"),
    ],
)
def test_a_key_both_set_is_refused(write_spec, key, value, where):
    doc = split_doc()
    doc["targets"]["t"][key] = value
    text = _error(write_spec, doc)
    assert where in text and "set it in one place" in text


def test_a_key_set_along_a_chain_is_refused(write_spec):
    doc = split_doc()
    doc["definitions"]["g"] = {"series": "patches/series"}
    doc["definitions"]["d"]["extends"] = "g"
    assert "definitions.d.series: also set by definitions.g.series" in _error(write_spec, doc)


def test_bad_value_from_a_definition_names_the_definition(write_spec):
    doc = split_doc()
    doc["definitions"]["d"]["series"] = "patches/nope"
    text = _error(write_spec, doc)
    assert text.endswith(
        "definitions.d.series (used by targets.t): file 'patches/nope' does not exist"
    )
    doc = split_doc()
    doc["definitions"]["d"]["expect"]["a.py"] = "xyz"
    assert "definitions.d.expect.a.py (used by targets.t): 'xyz' is not a git blob id" in _error(
        write_spec, doc
    )
    doc = split_doc()
    doc["definitions"]["d"]["vllm"]["python"] = 3
    assert (
        "definitions.d.vllm.python (used by targets.t): expected a non-empty string, got 3"
        in _error(write_spec, doc)
    )


def test_bad_value_a_target_adds_names_the_target(write_spec):
    doc = split_doc()
    doc["targets"]["t"]["vllm"]["root"] = "relative/vllm"
    assert (
        "targets.t.vllm.root: 'relative/vllm' must be an absolute path ending in /vllm"
        in _error(write_spec, doc)
    )


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda d: d["definitions"]["d"].update(bogus=1), "definitions.d.bogus: unknown key"),
        (lambda d: d.update(definitions=[1]), "definitions: expected a mapping, got list"),
        (
            lambda d: d["definitions"].update({"Bad Name": {}}),
            "definitions.Bad Name: 'Bad Name' is not a valid definition name",
        ),
        (
            lambda d: d["targets"]["t"].update(extends=["d"]),
            "targets.t.extends: expected a non-empty string, got ['d']",
        ),
        (
            lambda d: d["definitions"]["d"].update(extends=""),
            "definitions.d.extends: expected a non-empty string, got ''",
        ),
    ],
)
def test_malformed_definitions(write_spec, mutate, needle):
    doc = split_doc()
    mutate(doc)
    assert needle in _error(write_spec, doc)


def test_required_keys_may_come_from_the_definition_only(write_spec):
    doc = split_doc()
    del doc["definitions"]["d"]["series"]
    assert "targets.t.series: required key is missing" in _error(write_spec, doc)


def test_unpinned_target_is_still_fully_validated(write_spec, project):
    doc = split_doc()
    base = doc["targets"]["t"]["base"]
    del base["digest"]
    base["digest_file"] = "pins/t.digest"
    assert isinstance(load_spec(write_spec(copy.deepcopy(doc))).targets["t"], UnpinnedTarget)
    doc["definitions"]["d"]["series"] = "patches/nope"
    assert "definitions.d.series (used by targets.t): file 'patches/nope' does not exist" in _error(
        write_spec, doc
    )


def test_production_and_its_ci_target_share_one_definition():
    """The CI target builds what production builds: only the base, where the base keeps vLLM,
    the output and the lock differ (the committed image.yaml)."""
    spec = load_spec(REPO / "image.yaml")
    raw = yaml.safe_load((REPO / "image.yaml").read_text())
    production, ci = spec.resolved["mi300x"], spec.resolved["standin-4a560dd"]
    assert (
        raw["targets"]["mi300x"]["extends"]
        == raw["targets"]["standin-4a560dd"]["extends"]
        == "minimax-m3-mi300x"
    )
    for doc in (raw["targets"]["mi300x"], raw["targets"]["standin-4a560dd"]):
        assert set(doc) - PER_BASE == {"extends", "vllm"} and set(doc["vllm"]) == {"root"}

    def shared(doc: dict) -> dict:
        out = {k: v for k, v in doc.items() if k not in PER_BASE}
        out["vllm"] = {k: v for k, v in doc["vllm"].items() if k != "root"}
        return out

    assert shared(production) == shared(ci)
    assert production["series"] == "patches/series.pinned-4a560dd"
    assert production["expect"]["model_executor/layers/quantization/modelopt.py"] == "33c7c753"
    assert production["expect"]["model_executor/layers/fused_moe/config.py"] == "0755699d"
    assert production["expect"]["model_executor/layers/fused_moe/oracle/fp8.py"] == "acbf2cb4"
    target = spec.targets["standin-4a560dd"]
    if isinstance(target, Target):  # pinned once `make standin` ran
        assert target.series == REPO / "patches" / "series.pinned-4a560dd"
