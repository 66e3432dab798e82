"""builder.dockerfile: the delta Dockerfile renders exactly, values quoted, no instruction can be
injected."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
import pytest
from m3_builder_testlib import assert_one_line

import builder.dockerfile as dockerfile
from builder.dockerfile import dockerfile_quote, render_delta_dockerfile
from builder.errors import BuilderError
from builder.inputs import DELTA_TEMPLATE

BASE_REF = "127.0.0.1:5000/m3/base@sha256:" + "a" * 64
ALLOWED = ("FROM ", "COPY ", "LABEL ", "ENV ")


def render(labels=None, env=None, **kw) -> str:
    args = dict(
        builder_version="0.1.0",
        target="t",
        base_reference=BASE_REF,
        labels=labels if labels is not None else {},
        env=env if env is not None else {},
    )
    args.update(kw)
    return render_delta_dockerfile(**args)


def instructions(text: str) -> list[str]:
    """Logical instructions: comments/blank lines dropped, ``\\``-continued lines joined by one
    space."""
    out: list[str] = []
    pending = ""
    for line in text.split("\n"):
        if not pending and (line.startswith("#") or not line.strip()):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending += line[:-1].strip() + " "
            continue
        out.append((pending + line.strip()).strip())
        pending = ""
    assert not pending, "dangling line continuation"
    return out


_PAIR_RE = re.compile(r'([A-Za-z0-9._-]+)="((?:[^"\\]|\\.)*)"(?:\s+|$)')


def parse_pairs(args: str) -> dict[str, str]:
    """Parse ``k="v" k2="v2"`` the way the Dockerfile parser does (\\ escapes inside double
    quotes)."""
    pairs: dict[str, str] = {}
    pos = 0
    while pos < len(args):
        m = _PAIR_RE.match(args, pos)
        assert m, f"unparseable at {args[pos:]!r}"
        pairs[m.group(1)] = re.sub(r"\\(.)", r"\1", m.group(2))
        pos = m.end()
    return pairs


@pytest.mark.parametrize(
    "value, quoted",
    [
        ("plain", '"plain"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("C:\\path\\", '"C:\\\\path\\\\"'),
        ("$HOME ${X}", '"\\$HOME \\${X}"'),
        ('$(id) "q" \\ back', '"\\$(id) \\"q\\" \\\\ back"'),
        ("", '""'),
        (42, '"42"'),
        ("ünïcode ✓", '"ünïcode ✓"'),
    ],
)
def test_dockerfile_quote_exact(value, quoted):
    assert dockerfile_quote(value) == quoted


@pytest.mark.parametrize(
    "value", ["a\nb", "a\rb", "tab\there", "nul\x00", "del\x7f", "x\nRUN rm -rf /"]
)
def test_dockerfile_quote_refuses_control_characters(value):
    with pytest.raises(BuilderError) as info:
        dockerfile_quote(value)
    assert_one_line(info.value, "control character", repr(value[:40]))


def test_render_exact_instructions_sorted_and_quoted():
    text = render(
        labels={"org.z": "last", "org.a": '$(id) "q" \\ back', "m3.lock": "x"},
        env={"ZED": "z", "AAA": "$PATH:/x", "M3_FLAG": "1"},
    )
    assert instructions(text) == [
        "FROM scratch",
        "COPY delta/ /",
        'LABEL m3.lock="x" org.a="\\$(id) \\"q\\" \\\\ back" org.z="last"',
        'ENV AAA="\\$PATH:/x" M3_FLAG="1" ZED="z"',
    ]
    assert f"#   {BASE_REF}\n" in text
    assert text.startswith("# Rendered by m3-image 0.1.0 for target `t`.")
    assert text.endswith("\n")
    # round trip through a Dockerfile-style parser gives the values back exactly
    label_line, env_line = instructions(text)[2:]
    assert parse_pairs(label_line[len("LABEL ") :]) == {
        "m3.lock": "x",
        "org.a": '$(id) "q" \\ back',
        "org.z": "last",
    }
    assert parse_pairs(env_line[len("ENV ") :]) == {"AAA": "$PATH:/x", "M3_FLAG": "1", "ZED": "z"}


def test_render_is_deterministic_regardless_of_dict_order():
    a = render(labels={"b": "2", "a": "1"}, env={"Y": "y", "X": "x"})
    b = render(labels={"a": "1", "b": "2"}, env={"X": "x", "Y": "y"})
    assert a == b


def test_render_without_labels_or_env():
    assert instructions(render()) == ["FROM scratch", "COPY delta/ /"]


@pytest.mark.parametrize("kind", ["labels", "env"])
def test_newline_value_refused_and_never_rendered(kind):
    hostile = "x\nRUN rm -rf /"
    with pytest.raises(BuilderError) as info:
        render(**{kind: {"org.ok": "fine", "M3_EVIL": hostile}})
    text = assert_one_line(info.value, "M3_EVIL", "control character", repr(hostile[:40]))
    assert text.startswith(("LABEL M3_EVIL: ", "ENV M3_EVIL: "))


@pytest.mark.parametrize("field", ["target", "base_reference", "builder_version"])
def test_newline_in_header_values_refused(field):
    with pytest.raises(BuilderError) as info:
        render(**{field: "x\nRUN rm -rf /"})
    assert_one_line(info.value, field, "control character")


@pytest.mark.parametrize("key", ["bad key", "a=b", "-lead", "x\ny", "$X", ""])
def test_bad_keys_refused(key):
    with pytest.raises(BuilderError) as info:
        render(labels={key: "v"})
    assert_one_line(info.value, "Dockerfile key", repr(key))


@pytest.mark.parametrize(
    "labels, env",
    [
        (
            {"org.a": '$(id) "q" \\ back', "org.b": "`id`; echo pwned", "org.c": "\\"},
            {"X": "\\\\\\", "Y": '"; RUN id; "'},
        ),
        ({"org.a": "FROM evil"}, {"RUN": "rm -rf /"}),
        ({"org.a": "a \\ RUN id"}, {"E": "${X:-$(id)}"}),
    ],
)
def test_no_instruction_can_be_injected(labels, env):
    text = render(labels=labels, env=env)
    logical = instructions(text)
    for line in logical:
        assert line.startswith(ALLOWED), line
    # every physical non-comment line is an instruction or the continuation of one
    physical = [line for line in text.split("\n") if line.strip() and not line.startswith("#")]
    continued = False
    for line in physical:
        assert continued or line.startswith(ALLOWED), line
        continued = line.endswith("\\") and not line.endswith("\\\\")
    assert [line.split(" ", 1)[0] for line in logical] == ["FROM", "COPY", "LABEL", "ENV"]
    assert parse_pairs(logical[2][len("LABEL ") :]) == labels
    assert parse_pairs(logical[3][len("ENV ") :]) == env


def test_strict_undefined(tmp_path, monkeypatch):
    (tmp_path / DELTA_TEMPLATE).write_text(
        "FROM scratch\nLABEL x={{ no_such_variable | dockerfile_quote }}\n"
    )
    monkeypatch.setattr(dockerfile, "TEMPLATE_DIR", tmp_path)
    with pytest.raises(BuilderError) as info:
        render()
    assert_one_line(info.value, str(tmp_path / DELTA_TEMPLATE), "'no_such_variable' is undefined")


def test_strict_undefined_attribute(tmp_path, monkeypatch):
    (tmp_path / DELTA_TEMPLATE).write_text("FROM scratch\n# {{ target.nope }}\n")
    monkeypatch.setattr(dockerfile, "TEMPLATE_DIR", tmp_path)
    with pytest.raises(BuilderError) as info:
        render()
    assert_one_line(info.value, str(tmp_path / DELTA_TEMPLATE), "nope")


def test_environment_is_strict_and_unescaped():
    env = dockerfile._environment()
    assert env.undefined is jinja2.StrictUndefined
    assert env.autoescape is False
    assert Path(env.loader.searchpath[0]) == Path(dockerfile.TEMPLATE_DIR)
