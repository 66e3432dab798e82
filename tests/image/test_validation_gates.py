"""Proof the numerics gates catch subtle faults end to end: images whose stack (a) doubles
one 128x128 tile scale in the conversion, (b) gives the MiniMax-M3 SwiGLU-OAI alpha 1.0
instead of 1.702 inside the image, get no tag, and report.json / junit.xml name the check.

Reuses the fixtures and helpers of test_validation_failures.py (loaded by path: test
modules are not a package)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

_spec = importlib.util.spec_from_file_location(
    "m3_test_validation_failures", Path(__file__).with_name("test_validation_failures.py")
)
tvf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tvf)

project_copy = tvf.project_copy  # fixtures, shared
REPO = tvf.REPO
CONVERT = tvf.CONVERT
MINIMAX_CONFIG = "vllm/transformers_utils/configs/minimax_m3.py"
MINIMAX_CONFIG_BLOB = "c340dda8"  # vLLM 0.24.0


@pytest.fixture(scope="module")
def stack_files(tmp_path_factory):
    """The stand-in's files after the real stack, plus the MiniMax-M3 config (not touched
    by the stack): the sabotage patches' pre-images."""
    from builder.patchstack import apply_stack, load_series
    from standin.vllm_sources import vllm_site

    pristine = vllm_site(REPO / "build" / "cache")
    root = tmp_path_factory.mktemp("gates")
    for rel in (
        CONVERT,
        tvf.ORACLE,
        "vllm/model_executor/layers/quantization/modelopt.py",
        MINIMAX_CONFIG,
    ):
        if (pristine / rel).exists():  # the conversion module is created by 0001
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(pristine / rel, root / rel)
    apply_stack(load_series(REPO / "patches" / "series"), root)
    return root


def double_one_tile_scale(text: str) -> str:
    """The conversion's torch path (the one the CPU check runs) doubles the first tile scale."""
    end = "            rule,\n        )\n    return out, out_scale\n"
    assert text.count(end) == 1
    return text.replace(
        end,
        end.replace(
            "    return out, out_scale\n",
            "    out_scale.view(-1)[0] *= 2\n    return out, out_scale\n",
        ),
    )


def swiglu_alpha_one(text: str) -> str:
    return text.replace("swiglu_alpha: float = 1.702,", "swiglu_alpha: float = 1.0,")


def _numerics_details(result) -> dict:
    err = next(line for line in result.stderr.splitlines() if line.startswith("error: "))
    report = json.loads(
        (Path(re.search(r"report in (\S+)", err).group(1)) / "report.json").read_text()
    )
    return next(c for c in report["checks"] if c["name"] == "numerics_vs_native")


def test_one_tile_scale_doubled_fails_numerics(
    project_copy, stack_files, builder_cli, docker_client
):
    tvf.add_patch(
        project_copy,
        "0090-double-one-tile-scale.patch",
        tvf.sabotage_patch(stack_files, CONVERT, double_one_tile_scale),
    )
    result, lock = tvf.build_and_validate(builder_cli, project_copy)
    tvf.assert_refused(result, lock, docker_client, {"numerics_vs_native"})
    check = _numerics_details(result)
    assert (
        "max_tile_rel_err_weights=1 > 0.1 (worst tile: w13 expert 0 tile [0,0])" in check["reason"]
    )
    assert check["details"]["max_tile_rel_err_weights"] == pytest.approx(1.0)
    assert check["details"]["rel_err_weights"] < 0.05  # the whole-tensor gate alone misses it


def test_swiglu_alpha_one_in_the_image_fails(project_copy, stack_files, builder_cli, docker_client):
    tvf.add_patch(
        project_copy,
        "0090-swiglu-alpha-one.patch",
        tvf.sabotage_patch(stack_files, MINIMAX_CONFIG, swiglu_alpha_one),
        expect={MINIMAX_CONFIG.split("/", 1)[1]: MINIMAX_CONFIG_BLOB},
    )
    result, lock = tvf.build_and_validate(builder_cli, project_copy)
    tvf.assert_refused(result, lock, docker_client, {"numerics_vs_native", "swiglu_params"})
    check = _numerics_details(result)
    assert re.search(r"image_vs_emulation=0\.0[23]\d* > 0\.005", check["reason"]), check["reason"]
    assert check["details"]["swiglu_image"]["alpha"] == 1.0
    assert check["details"]["swiglu_reference"]["alpha"] == 1.702
    # the looser output gates alone would have let it through
    assert (
        check["details"]["rel_err_vs_golden"] < 0.13 and check["details"]["rel_err_vs_bf16"] < 0.11
    )
