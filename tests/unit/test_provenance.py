"""builder.provenance: the OCI labels of an image, from the typed lock (byte-identical to the dict
code path)."""

from __future__ import annotations

import json

import pytest
from lockfixture import (
    FIXED_BUILDER_VERSION,
    FIXED_DIGEST,
    FIXED_TAG,
    FIXTURES,
    fixed_base,
    fixed_inputs,
    fixed_tree,
)

import builder
from builder.lock import compute_lock
from builder.provenance import NS, image_labels


@pytest.fixture
def lock(monkeypatch):
    monkeypatch.setattr(builder, "__version__", FIXED_BUILDER_VERSION)
    return compute_lock(fixed_inputs(), fixed_base(), fixed_tree())


def test_labels_equal_what_the_dict_code_path_wrote(lock):
    labels = image_labels(lock, lock.inputs.labels)
    assert (
        json.dumps(labels, indent=2, sort_keys=True) + "\n"
        == (FIXTURES / "fixed.labels.json").read_text()
    )


def test_identity_labels(lock):
    labels = image_labels(lock, {})
    assert labels[f"{NS}.lock.sha256"] == FIXED_DIGEST
    assert labels[f"{NS}.content-tag"] == labels["org.opencontainers.image.version"] == FIXED_TAG
    assert labels[f"{NS}.upstream-prs"] == "vLLM #45726"  # the local-only patch ("") is left out
    assert json.loads(labels[f"{NS}.patches"]) == [
        {"file": "0001-a.patch", "sha256": "3" * 64, "upstream": "vLLM #45726"},
        {"file": "0002-b.patch", "sha256": "4" * 64, "upstream": ""},
    ]
    assert labels[f"{NS}.base.config"] == "sha256:" + "b" * 64


def test_extra_labels_win(lock):
    labels = image_labels(lock, {"org.opencontainers.image.source": "elsewhere", "x.y": "z"})
    assert labels["org.opencontainers.image.source"] == "elsewhere" and labels["x.y"] == "z"
