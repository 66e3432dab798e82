"""Helpers around the patched vLLM: platform mocking and log capture."""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

# Keep vLLM quiet and offline for the suite.
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

import torch  # noqa: E402

ARCHES: dict[str, dict[str, Any]] = {
    # MI300X / MI325X: FNUZ FP8, no MX support
    "gfx942": {"supports_mx": False, "fnuz": True, "cap": (9, 4)},
    # MI355X: OCP FP8, native MX
    "gfx950": {"supports_mx": True, "fnuz": False, "cap": (9, 5)},
}


def real_gpu_arch() -> str | None:
    """The gfx arch of device 0 when a ROCm GPU is usable, else None."""
    try:
        if not torch.cuda.is_available() or torch.version.hip is None:
            return None
        props = torch.cuda.get_device_properties(0)
        return getattr(props, "gcnArchName", "").split(":")[0] or None
    except Exception:
        return None


PRELOAD = (
    "vllm.model_executor.layers.fused_moe",
    "vllm.model_executor.layers.fused_moe.fused_moe",
    "vllm.model_executor.layers.fused_moe.oracle.fp8",
    "vllm.model_executor.layers.fused_moe.oracle.mxfp8",
    "vllm.model_executor.layers.fused_moe.experts.triton_moe",
    "vllm.model_executor.layers.fused_moe.experts.mxfp8_emulation_moe",
    "vllm.model_executor.layers.fused_moe.experts.mxfp8_native_moe",
    "vllm.model_executor.layers.quantization.modelopt",
)


def preload_vllm_modules() -> None:
    """Import what the checks drive *before* mocking: vLLM decides some things at
    import time (e.g. ``vllm.platforms.rocm`` probes the GPU when imported), which
    must see the real platform, not the mock."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    with contextlib.suppress(ImportError):
        importlib.import_module(CONVERSION_MODULE)


@contextlib.contextmanager
def mocked_platform(arch: str, device_name: str = "AMD_Instinct_MI300X"):
    """Make vLLM's ``current_platform`` look like a ROCm ``arch`` device.

    Every vLLM module imports the same ``current_platform`` object, so the
    overrides are set on that instance and removed afterwards.
    """
    from vllm.platforms import current_platform as cp
    from vllm.platforms.interface import DeviceCapability

    preload_vllm_modules()
    spec = ARCHES[arch]
    fp8 = torch.float8_e4m3fnuz if spec["fnuz"] else torch.float8_e4m3fn
    cap = DeviceCapability(*spec["cap"])
    overrides = {
        "is_rocm": lambda: True,
        "is_cuda": lambda: False,
        "is_cuda_alike": lambda: True,
        "is_xpu": lambda: False,
        "is_cpu": lambda: False,
        "supports_mx": lambda: spec["supports_mx"],
        "supports_fp8": lambda: True,
        "is_fp8_fnuz": lambda: spec["fnuz"],
        "fp8_dtype": lambda: fp8,
        "get_device_name": lambda device_id=0: device_name,
        "get_device_capability": lambda device_id=0: cap,
        "has_device_capability": lambda capability, device_id=0: (
            cap.to_int()
            >= (capability if isinstance(capability, int) else capability[0] * 10 + capability[1])
        ),
        "is_device_capability": lambda capability, device_id=0: False,
        "is_device_capability_family": lambda capability, device_id=0: False,
        "device_name": "rocm",
    }
    missing = object()
    saved = {k: cp.__dict__.get(k, missing) for k in overrides}
    for k, v in overrides.items():
        object.__setattr__(cp, k, v)
    clear_device_name_cache()
    try:
        yield cp
    finally:
        for k, v in saved.items():
            if v is missing:
                with contextlib.suppress(AttributeError):
                    object.__delattr__(cp, k)
            else:
                object.__setattr__(cp, k, v)
        clear_device_name_cache()


def clear_device_name_cache() -> None:
    """vLLM 0.27 on caches the table-lookup device name (``get_device_name_as_file_name``,
    one device per process); a mock that changes the name must drop that cache."""
    try:
        from vllm.utils.platform_utils import get_device_name_as_file_name
    except ImportError:
        return
    clear = getattr(get_device_name_as_file_name, "cache_clear", None)
    if clear is not None:
        clear()


@contextlib.contextmanager
def mocked_device_name(device_name: str):
    """Only the device name (vLLM's tuned-table lookup key) is overridden."""
    from vllm.platforms import current_platform as cp

    missing = object()
    saved = cp.__dict__.get("get_device_name", missing)
    object.__setattr__(cp, "get_device_name", lambda device_id=0: device_name)
    clear_device_name_cache()
    try:
        yield cp
    finally:
        if saved is missing:
            object.__delattr__(cp, "get_device_name")
        else:
            object.__setattr__(cp, "get_device_name", saved)
        clear_device_name_cache()


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        try:
            self.lines.append(record.getMessage())
        except Exception:
            self.lines.append(str(record.msg))


def clear_log_once_caches() -> None:
    """vLLM's ``*_once`` loggers dedupe per process: reset them so a line is re-emitted."""
    import vllm.logger as vl

    for name in ("_print_debug_once", "_print_info_once", "_print_warning_once"):
        fn = getattr(vl, name, None)
        if fn is not None and hasattr(fn, "cache_clear"):
            fn.cache_clear()


@contextlib.contextmanager
def captured_vllm_log():
    """Capture every record logged under the ``vllm`` logger hierarchy."""
    clear_log_once_caches()
    lg = logging.getLogger("vllm")
    h = _Collect()
    old = lg.level
    lg.addHandler(h)
    lg.setLevel(logging.DEBUG)
    try:
        yield h.lines
    finally:
        lg.removeHandler(h)
        lg.setLevel(old)


def moe_config(
    *, num_experts=128, top_k=4, hidden=6144, intermediate=3072, swiglu=None, device="cpu"
):
    """A MiniMax-M3-shaped ``FusedMoEConfig`` (TP1 view of one MoE layer)."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (
        FusedMoEConfig,
        FusedMoEParallelConfig,
        RoutingMethodType,
    )

    sw = swiglu or {"alpha": 1.702, "beta": 1.0, "limit": 7.0}
    return FusedMoEConfig(
        num_experts=num_experts,
        experts_per_token=top_k,
        hidden_dim=hidden,
        intermediate_size=intermediate,
        num_local_experts=num_experts,
        num_logical_experts=num_experts,
        activation=MoEActivation.SWIGLUOAI_UNINTERLEAVE,
        device=device,
        routing_method=RoutingMethodType.Renormalize,
        moe_parallel_config=FusedMoEParallelConfig.make_no_parallel(),
        in_dtype=torch.bfloat16,
        swiglu_limit=sw["limit"],
        swiglu_alpha=sw["alpha"],
        swiglu_beta=sw["beta"],
    )


CONVERSION_MODULE = "vllm.model_executor.layers.quantization.utils.mxfp8_block_fp8"


def conversion_module():
    import importlib

    return importlib.import_module(CONVERSION_MODULE)
