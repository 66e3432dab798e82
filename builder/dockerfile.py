"""Render Dockerfiles from the Jinja2 templates in ``dockerfiles/`` (StrictUndefined, one
environment for all of them); the delta's values are validated and quoted."""

from __future__ import annotations

import re

import jinja2

from builder.errors import BuilderError
from builder.inputs import DELTA_TEMPLATE, TEMPLATE_DIR

_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def dockerfile_quote(value: object) -> str:
    """Quote a value for LABEL/ENV: refuses control characters (a newline would start a new
    instruction), escapes the characters the Dockerfile parser treats specially inside
    double quotes (backslash, double quote, and ``$`` which would expand variables)."""
    text = str(value)
    bad = next((c for c in text if ord(c) < 0x20 or ord(c) == 0x7F), None)
    if bad is not None:
        raise BuilderError(
            f"Dockerfile value {text[:40]!r}: control character {bad!r} is not allowed"
        )
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["dockerfile_quote"] = dockerfile_quote
    return env


def render_delta_dockerfile(
    *,
    builder_version: str,
    target: str,
    base_reference: str,
    labels: dict[str, str],
    env: dict[str, str],
) -> str:
    for key in list(labels) + list(env):
        if not _KEY_RE.match(key):
            raise BuilderError(
                f"Dockerfile key {key!r}: only letters, digits, '.', '_' and '-' are allowed"
            )
    # Check every value up front so the error names its key (the filter only sees the value);
    # the header values land in comment lines, where a newline would start an instruction too.
    for kind, items in (("LABEL", labels), ("ENV", env)):
        for key, value in items.items():
            try:
                dockerfile_quote(value)
            except BuilderError as exc:
                raise BuilderError(f"{kind} {key}: {exc}") from None
    for name, value in (
        ("builder_version", builder_version),
        ("target", target),
        ("base_reference", base_reference),
    ):
        try:
            dockerfile_quote(value)
        except BuilderError as exc:
            raise BuilderError(f"{name}: {exc}") from None
    return render_template(
        DELTA_TEMPLATE,
        builder_version=builder_version,
        target=target,
        base_reference=base_reference,
        labels=sorted(labels.items()),
        env=sorted(env.items()),
    )


def render_template(name: str, **values: object) -> str:
    """Render ``dockerfiles/<name>``; an undefined variable or a syntax error is one line."""
    try:
        return _environment().get_template(name).render(**values)
    except jinja2.UndefinedError as exc:
        raise BuilderError(f"{TEMPLATE_DIR / name}: {exc.message}") from None
    except jinja2.TemplateSyntaxError as exc:
        raise BuilderError(f"{TEMPLATE_DIR / name}:{exc.lineno}: {exc.message}") from None
