"""vLLM's fused-MoE table file names, and re-targeting a measured table to another device name.

vLLM looks a tuned table up as
``E=<E>,N=<N>,device_name=<device>[,dtype=...][,block_shape=...].json``
in ``fused_moe/configs/``, where ``<device>`` is ``current_platform.get_device_name()`` with
spaces replaced by underscores. Devices of one chip family that vLLM names differently (MI325X is
gfx942 with MI300X's 304 compute units) can share a table measured on one of them: the same bytes
are installed under each device's name.
"""

from __future__ import annotations

import re

DEVICE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_FIELD_RE = re.compile(r"(^|,)device_name=([^,]+?)(?=,|\.json$)")


def device_of(table_name: str) -> str | None:
    """The ``device_name=`` field of a table file name, or None when it has none."""
    match = _FIELD_RE.search(table_name)
    return match.group(2) if match else None


def retarget(table_name: str, device: str) -> str:
    """The file name vLLM looks up for the same table on ``device``.

    Raises ValueError when the name has no ``device_name=`` field or ``device`` is not a
    plain device name.
    """
    if not DEVICE_NAME_RE.match(device):
        raise ValueError(f"{device!r} is not a vLLM device name (letters, digits, '_', '.', '-')")
    if device_of(table_name) is None:
        raise ValueError(f"{table_name!r} has no device_name= field")
    return _FIELD_RE.sub(lambda m: f"{m.group(1)}device_name={device}", table_name, count=1)


def spec_table_names(spec_file) -> list[str]:
    """Every lookup name any target of ``spec_file`` installs (its tables, and their copies for
    ``tables_also_for``), without validating the rest of the spec (unpinned targets included)."""
    from pathlib import Path, PurePosixPath

    import yaml

    try:
        doc = yaml.safe_load(Path(spec_file).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(
            f"{spec_file}: cannot read the spec ({getattr(exc, 'strerror', None) or exc})"
        ) from None
    definitions = (doc or {}).get("definitions") or {}

    def field(entry: dict, key: str) -> list:
        # a target's own key, else the one of the definition it ``extends`` (and so on)
        seen: set = set()
        while isinstance(entry, dict):
            if key in entry:
                return list(entry[key] or [])
            parent = entry.get("extends")
            if parent in seen or parent not in definitions:
                return []
            seen.add(parent)
            entry = definitions[parent]
        return []

    names: list[str] = []
    for target in ((doc or {}).get("targets") or {}).values():
        tables = [PurePosixPath(str(t)).name for t in field(target or {}, "tables")]
        names += tables + [
            retarget(t, d) for d in field(target or {}, "tables_also_for") for t in tables
        ]
    return list(dict.fromkeys(names))
