"""builder.pypi against a local HTTP server that speaks PyPI's JSON API (no network): versions,
ranges, hash-pinned download into the cache, and the one-line errors (unknown version, hash
mismatch, HTTP failure) that leave nothing in the cache."""

from __future__ import annotations

import hashlib

import pytest
from m3_matrix_testlib import FakeIndex, make_wheel

from builder.pypi import PyPI, PyPIError


@pytest.fixture
def index():
    made = []

    def make(releases, lie=frozenset()):
        made.append(FakeIndex(releases, lie))
        return made[-1]

    yield make
    for i in made:
        i.close()


WHEELS = {
    v: make_wheel({"vllm/__init__.py": v.encode()})
    for v in ["0.24.0", "0.25.0", "0.25.1", "0.30.0"]
}


def test_versions_skip_prereleases_and_empty_releases(index):
    pypi = PyPI(index(WHEELS).url)
    assert pypi.versions() == ["0.24.0", "0.25.0", "0.25.1", "0.30.0"]
    assert pypi.expand(["0.25.0..0.30.0", "0.24.0", "0.30.0"]) == [
        "0.25.0",
        "0.25.1",
        "0.30.0",
        "0.24.0",
    ]


@pytest.mark.parametrize("spec", ["0.23.1", "0.24.0..0.99.0", "0.9.0rc1", "0.1.0"])
def test_unknown_version_is_one_line(index, spec):
    with pytest.raises(PyPIError) as info:
        PyPI(index(WHEELS).url).expand([spec])
    assert "\n" not in str(info.value)
    assert "not a release on http://127.0.0.1:" in str(info.value) and "vllm==" in str(info.value)


def test_fetch_checks_the_hash_then_caches_by_it(index, tmp_path):
    fake = index(WHEELS)
    pypi = PyPI(fake.url)
    release = pypi.wheel("0.30.0")
    assert release.sha256 == hashlib.sha256(WHEELS["0.30.0"]).hexdigest()
    path, downloaded = pypi.fetch(release, tmp_path)
    assert downloaded and path == tmp_path / "pypi" / release.sha256 / release.filename
    assert path.read_bytes() == WHEELS["0.30.0"]
    hits = len(fake.hits)
    again, downloaded = PyPI(fake.url).fetch(release, tmp_path)
    assert (again, downloaded) == (path, False) and len(fake.hits) == hits  # no request at all
    assert sorted(p.name for p in (tmp_path / "pypi" / release.sha256).iterdir()) == [
        release.filename
    ]


def test_hash_mismatch_is_one_line_and_caches_nothing(index, tmp_path):
    pypi = PyPI(index(WHEELS, lie={"0.25.0"}).url)
    with pytest.raises(PyPIError) as info:
        pypi.fetch(pypi.wheel("0.25.0"), tmp_path)
    msg = str(info.value)
    assert msg == (
        f"vllm-0.25.0-cp38-abi3-manylinux_2_28_x86_64.whl: sha256 "
        f"{hashlib.sha256(WHEELS['0.25.0']).hexdigest()} does not match PyPI's {'0' * 64}; "
        "nothing was cached"
    )
    assert [p for p in (tmp_path / "pypi").rglob("*") if p.is_file()] == []


def test_missing_file_is_one_line_and_caches_nothing(index, tmp_path):
    fake = index(WHEELS)
    pypi = PyPI(fake.url)
    release = pypi.wheel("0.24.0")
    del fake.wheels[release.filename]
    with pytest.raises(PyPIError, match=r"packages/vllm-0.24.0-.*\.whl: HTTP 404$"):
        pypi.fetch(release, tmp_path)
    assert [p for p in (tmp_path / "pypi").rglob("*") if p.is_file()] == []


def test_index_that_is_not_pypi(tmp_path):
    with pytest.raises(PyPIError, match=r"^http://127.0.0.1:9/pypi/vllm/json: unreachable"):
        PyPI("http://127.0.0.1:9").versions()
