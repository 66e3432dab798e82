"""The canonical delta layer: a tar the builder writes itself, byte for byte, from the context tree.

No engine writes this layer, so no engine's version can change it (Docker 20.10 writes
file-type bits into ``mode`` and ``root`` as owner names, Docker 28 and Podman do not). The
form, documented in docs/delivery.md ("The image's bytes belong to the builder"):

* POSIX ustar headers only (magic ``ustar\\0``, version ``00``): no pax or GNU records at all;
  a path that does not fit ustar's 155-byte prefix + 100-byte name is refused;
* entries sorted by path (byte order), each directory before what it holds; directories end
  in ``/``, names are relative (no ``./``), ASCII;
* only directories (mode 0755) and regular files (0644, or 0755 when executable): mode holds
  the permission bits only; uid/gid 0, uname/gname empty, devmajor/devminor 0;
* mtime = one value from the inputs (the base's creation time) for every entry;
* numeric fields: zero-padded octal, NUL-terminated; checksum: 6 octal digits, NUL, space;
* the archive ends with two zero blocks, no padding to a record size.

Uncompressed, so the layer digest equals its diff_id and the pushed manifest is the same on
every machine (no compressor in the identity).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from builder.errors import BuilderError

BLOCK = 512
_REGULAR, _DIRECTORY = b"0", b"5"


def _octal(value: int, width: int) -> bytes:
    """``width`` bytes: zero-padded octal digits then NUL."""
    digits = format(value, "o").encode()
    if len(digits) > width - 1:
        raise BuilderError(f"layer: value {value} does not fit a {width}-byte tar field")
    return digits.rjust(width - 1, b"0") + b"\0"


def _split(name: str) -> tuple[bytes, bytes]:
    """(prefix, name) for a ustar header; refuse what ustar cannot hold without pax records."""
    try:
        raw = name.encode("ascii")
    except UnicodeEncodeError:
        raise BuilderError(
            f"layer: {name!r}: only ASCII paths are allowed in the delta layer"
        ) from None
    if len(raw) <= 100:
        return b"", raw
    for cut in range(len(raw) - 1, 0, -1):  # the longest prefix that fits, cut at a '/'
        if raw[cut : cut + 1] == b"/" and cut <= 155 and len(raw) - cut - 1 <= 100:
            return raw[:cut], raw[cut + 1 :]
    raise BuilderError(
        f"layer: {name}: path too long for a ustar header (prefix 155 + name 100 bytes)"
    )


def header(name: str, *, size: int, mode: int, mtime: int, typeflag: bytes) -> bytes:
    prefix, short = _split(name)
    fields = [
        short.ljust(100, b"\0"),
        _octal(mode, 8),
        _octal(0, 8),
        _octal(0, 8),  # mode, uid, gid
        _octal(size, 12),
        _octal(mtime, 12),
        b" " * 8,  # checksum placeholder
        typeflag,
        b"\0" * 100,  # linkname
        b"ustar\x0000",  # magic + version
        b"\0" * 32,
        b"\0" * 32,  # uname, gname: empty
        _octal(0, 8),
        _octal(0, 8),  # devmajor, devminor
        prefix.ljust(155, b"\0"),
    ]
    block = b"".join(fields).ljust(BLOCK, b"\0")
    checksum = format(sum(block), "06o").encode() + b"\0 "
    return block[:148] + checksum + block[156:]


def _entries(root: Path) -> list[tuple[str, Path, bool]]:
    """(name in the layer, path on disk, is_dir) for everything under ``root``, sorted."""
    found: list[tuple[str, Path, bool]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        for name in dirnames + filenames:
            path = here / name
            info = path.lstat()
            rel = path.relative_to(root).as_posix()
            if stat.S_ISDIR(info.st_mode):
                found.append((rel + "/", path, True))
            elif stat.S_ISREG(info.st_mode):
                found.append((rel, path, False))
            else:
                raise BuilderError(
                    f"layer: {rel}: only regular files and directories go into the delta layer"
                )
    return sorted(found, key=lambda entry: entry[0].rstrip("/").encode())


def canonical_layer(root: Path, mtime: int) -> bytes:
    """The delta layer for the tree under ``root`` (``root`` itself is the image's ``/``)."""
    out = bytearray()
    for name, path, is_dir in _entries(root):
        if is_dir:
            out += header(name, size=0, mode=0o755, mtime=mtime, typeflag=_DIRECTORY)
            continue
        data = path.read_bytes()
        executable = bool(path.stat().st_mode & 0o111)
        out += header(
            name,
            size=len(data),
            mode=0o755 if executable else 0o644,
            mtime=mtime,
            typeflag=_REGULAR,
        )
        out += data
        out += b"\0" * (-len(data) % BLOCK)
    out += b"\0" * (2 * BLOCK)
    return bytes(out)


def tar_of(files: list[tuple[str, bytes]], mtime: int = 0) -> bytes:
    """A tar of in-memory regular files (0644), in the given order, with the same header form."""
    out = bytearray()
    for name, data in files:
        out += header(name, size=len(data), mode=0o644, mtime=mtime, typeflag=_REGULAR)
        out += data
        out += b"\0" * (-len(data) % BLOCK)
    out += b"\0" * (2 * BLOCK)
    return bytes(out)
