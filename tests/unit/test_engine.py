"""builder.engine.check_stream: errors docker-py leaves inside progress streams become one-line
errors."""

from __future__ import annotations

import pytest

from builder.engine import check_stream
from builder.errors import EngineError


def test_a_clean_stream_is_returned_and_progress_is_one_line_per_state():
    chunks = [
        {"status": "Pulling fs layer", "id": "l1"},
        {"status": "Downloading", "id": "l1", "progress": "1"},
        {"status": "Downloading", "id": "l1", "progress": "2"},
        {"stream": "Step 1/2\n"},
        {"stream": "\n"},
        {"status": "Digest: sha256:x"},
    ]
    seen = []
    assert check_stream(iter(chunks), "pull x", seen.append) == chunks
    assert seen == ["l1: Pulling fs layer", "l1: Downloading", "Step 1/2", "Digest: sha256:x"]


@pytest.mark.parametrize(
    "chunk, message",
    [
        (
            {"errorDetail": {"message": "manifest unknown"}, "error": "manifest unknown"},
            "pull x: manifest unknown",
        ),
        ({"error": "boom"}, "pull x: boom"),
        ({"errorDetail": {}}, "pull x: unknown error"),
    ],
)
def test_the_first_error_in_a_stream_raises(chunk, message):
    after = []
    with pytest.raises(EngineError) as info:
        check_stream(
            iter([{"status": "ok"}, chunk, {"status": "never read"}]), "pull x", after.append
        )
    assert str(info.value) == message
    assert after == ["ok"]


@pytest.mark.parametrize(
    "detail, needles",
    [
        ("write /var/lib/docker/x: no space left on device", ["ran out of disk space"]),
        ("unauthorized: authentication required", ["refused the credentials", "docker login"]),
        (
            "Put http://r/v2/x/blobs/uploads/abc?_state=SECRETTOKEN: EOF",
            ["unreachable or went away"],
        ),
    ],
)
def test_known_engine_failures_are_explained_and_upload_tokens_dropped(detail, needles):
    with pytest.raises(EngineError) as info:
        check_stream([{"error": detail}], "push r/x:1")
    text = str(info.value)
    assert text.startswith("push r/x:1: ") and "\n" not in text and "SECRETTOKEN" not in text
    for needle in needles:
        assert needle in text
