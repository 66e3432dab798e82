"""Golden output file: the native MXFP8 path's output for the seeded problem."""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from pathlib import Path

import torch

from m3_smoke import numerics

FORMAT = "m3_smoke.golden"


def encode(out: torch.Tensor, prob: dict, producer: dict) -> dict:
    raw = numerics.tensor_bytes(out.to(torch.bfloat16))
    return {
        "format": FORMAT,
        "version": 1,
        "problem_version": numerics.PROBLEM_VERSION,
        "problem": prob["params"],
        "inputs_sha256": numerics.inputs_sha256(prob),
        "producer": producer,
        "output": {
            "dtype": "bfloat16",
            "byteorder": "little",
            "shape": list(out.shape),
            "sha256": hashlib.sha256(raw).hexdigest(),
            "data_b64": base64.b64encode(raw).decode("ascii"),
        },
    }


def write(path: Path, doc: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")


class GoldenError(Exception):
    pass


def load(path: str | Path) -> tuple[dict, torch.Tensor]:
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise GoldenError(f"golden {path}: cannot read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise GoldenError(f"golden {path}: invalid JSON ({exc.msg})") from None
    if doc.get("format") != FORMAT or doc.get("version") != 1:
        raise GoldenError(f"golden {path}: not an {FORMAT} v1 file")
    o = doc["output"]
    raw = base64.b64decode(o["data_b64"])
    if hashlib.sha256(raw).hexdigest() != o["sha256"]:
        raise GoldenError(f"golden {path}: output sha256 mismatch (corrupt file)")
    if o["dtype"] != "bfloat16" or o["byteorder"] != sys.byteorder:
        raise GoldenError(
            f"golden {path}: unsupported dtype/byteorder {o['dtype']}/{o['byteorder']}"
        )
    t = torch.frombuffer(bytearray(raw), dtype=torch.bfloat16).clone().view(*o["shape"])
    return doc, t
