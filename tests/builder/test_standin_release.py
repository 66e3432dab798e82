"""Stand-ins for other vLLM releases (no engine): pins, the release Dockerfile, the wheel cache."""

from __future__ import annotations

import pytest
from m3_builder_testlib import assert_one_line

from builder.dockerfile import render_template
from builder.errors import BuilderError
from standin.vllm_sources import WHEELS, fetch_wheel, pinned


def test_unknown_release_is_one_line():
    with pytest.raises(BuilderError) as info:
        pinned("0.31.0")
    assert_one_line(
        info.value, "vLLM 0.31.0: no stand-in is pinned for it (have: 0.24.0, 0.30.0, 0.34.0)"
    )


def test_cached_wheel_is_used_without_asking_pypi(tmp_path, monkeypatch):
    name, sha = WHEELS["0.30.0"]
    cached = tmp_path / "pypi" / sha / name
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"verified when it was written")
    import standin.vllm_sources as sources

    def no_pypi(*args, **kwargs):
        raise AssertionError("PyPI was asked although the verified wheel is cached")

    monkeypatch.setattr(sources, "PyPI", no_pypi)
    assert fetch_wheel(tmp_path, "0.30.0") == cached


def test_release_dockerfile_replaces_the_default_tree():
    text = render_template(
        "standin-release.Dockerfile.j2",
        default_base="reg/m3@sha256:" + "a" * 64,
        site_packages="/usr/local/lib/python3.11/dist-packages",
        python="/usr/bin/python3",
        vllm_version="0.30.0",
        shared_version="0.24.0",
        suite="bookworm",
        fingerprint_label="org.m3-image.standin.inputs",
        fingerprint="f" * 64,
    )
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert lines[:4] == [
        "FROM reg/m3@sha256:" + "a" * 64,
        "RUN rm -rf /usr/local/lib/python3.11/dist-packages/vllm "
        "/usr/local/lib/python3.11/dist-packages/vllm-0.24.0.dist-info",
        "COPY site-extra/ /usr/local/lib/python3.11/dist-packages/",
        "COPY vllm/ /usr/local/lib/python3.11/dist-packages/vllm/",
    ]
    assert 'org.m3-image.standin.inputs="' + "f" * 64 + '"' in text
