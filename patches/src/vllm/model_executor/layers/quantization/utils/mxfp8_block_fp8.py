# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Load-time conversion of MXFP8 MoE weights to 128x128 block FP8.

MXFP8 (OCP MX) stores E4M3FN values with one E8M0 scale per 1x32 group.
Devices without MX matrix-core support (gfx942 / MI300X) can instead run the
regular Triton block-FP8 fused-MoE kernel, which wants one fp32 scale per
128x128 tile and the platform FP8 dtype (E4M3FNUZ on gfx942).

Rounding rule ("pow2", the default): the tile scale is the largest E8M0 scale
of the tile, ``S = 2**(max(e) - 127)``.  Each element then becomes
``w * 2**(e - max(e))`` -- a pure exponent shift of an E4M3 value:

* groups that carry the tile's largest scale are reproduced bit-exactly;
* shifted values that stay in the normal range are exact as well;
* only values that fall into the E4M3 subnormal range are rounded
  (round-to-nearest-even), so ``|error| <= 2**-10 * S`` per element.

The alternative "amax" rule (``S = amax / 448``) re-rounds every element and is
kept for comparison only (it is measurably worse, see docs/patch-stack.md).

For E4M3FNUZ the E4M3FN result is re-encoded bit-for-bit: the same bits are
worth half in FNUZ, so the scale is doubled and 0x80 (FN -0, FNUZ NaN) is
never produced (zeros are always +0).

This module imports only torch and the standard library so it can be tested on
CPU and reused from smoke tests.  On a GPU with Triton available a fused
arithmetic kernel is used (same bits as the torch path).
"""

from __future__ import annotations

import logging

import torch

__all__ = [
    "BACKEND_MARKER",
    "CONVERSION_MARKER",
    "MXFP8_GROUP",
    "convert_mxfp8_to_block_fp8",
    "dequant_block_fp8",
    "dequant_mxfp8",
    "plan_chunks",
]

_log = logging.getLogger(__name__)

# Logged once by the MXFP8 MoE oracle when it picks the Triton block-FP8 path on
# an FP8-FNUZ (gfx942) device.  Smoke tests grep for this exact text.
BACKEND_MARKER = (
    "Using Triton block-FP8 fused MoE backend for MXFP8 weights on an "
    "FP8-FNUZ (gfx942) device: MXFP8 experts are converted to 128x128 "
    "block FP8 at load time."
)
# Prefix of the line ModelOpt logs after converting the expert weights.
CONVERSION_MARKER = "MXFP8->block-FP8 load-time conversion complete"

MXFP8_GROUP = 32
_E8M0_NAN = 255
# Upper bound of the torch path's temporaries per weight element (fp32 copy,
# fp8 result before re-encoding, mask), used to size the chunks.
_TORCH_WS_BYTES_PER_ELEM = 7
_TORCH_WS_BYTES_PER_ELEM_AMAX = 12
# FNUZ scales are 2**(e - 126): e >= 254 would overflow fp32.
_FNUZ_SCALE_OVERFLOW_E = 254


def _fp8_max(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).max)


def _check_inputs(
    weight: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype, block_size: int
) -> tuple[int, int, int]:
    if weight.dtype != torch.float8_e4m3fn:
        raise TypeError(f"MXFP8 weight must be float8_e4m3fn, got {weight.dtype}")
    if scale.dtype != torch.uint8:
        raise TypeError(f"MXFP8 scale must be uint8 (E8M0), got {scale.dtype}")
    if fp8_dtype not in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
        raise TypeError(f"fp8_dtype must be float8_e4m3fn or _fnuz, got {fp8_dtype}")
    if weight.dim() != 3:
        raise ValueError(f"MXFP8 weight must be [E, N, K], got {tuple(weight.shape)}")
    if block_size <= 0 or block_size % MXFP8_GROUP:
        raise ValueError(f"block_size must be a multiple of 32, got {block_size}")
    E, N, K = weight.shape
    if K % MXFP8_GROUP:
        raise ValueError(
            f"MXFP8 weight K={K} is not a multiple of the MX group size "
            f"{MXFP8_GROUP}; cannot convert to block FP8."
        )
    if tuple(scale.shape) != (E, N, K // MXFP8_GROUP):
        raise ValueError(
            f"MXFP8 scale shape {tuple(scale.shape)} does not match weight "
            f"{tuple(weight.shape)} (expected {(E, N, K // MXFP8_GROUP)})."
        )
    if scale.device != weight.device:
        raise ValueError("MXFP8 weight and scale must be on the same device")
    return E, N, K


def plan_chunks(
    E: int, N: int, K: int, workspace_bytes: int, bytes_per_elem: float, block: int
) -> list[tuple[int, int, int, int]]:
    """Split [E, N, K] into (e0, e1, n0, n1) chunks whose temporaries
    (``elements * bytes_per_elem``) stay under ``workspace_bytes``.

    Whole experts are grouped when they fit; otherwise an expert is split along
    N in multiples of ``block`` rows (tile rows never straddle a chunk)."""
    per_row = K * bytes_per_elem
    min_rows = min(N, block)
    if min_rows * per_row > workspace_bytes:
        raise ValueError(
            f"workspace_bytes={workspace_bytes} is too small: converting one "
            f"{min_rows}x{K} tile row needs {int(min_rows * per_row)} bytes."
        )
    per_expert = N * per_row
    chunks: list[tuple[int, int, int, int]] = []
    if per_expert <= workspace_bytes:
        step = max(1, int(workspace_bytes // max(per_expert, 1)))
        for e0 in range(0, E, step):
            chunks.append((e0, min(E, e0 + step), 0, N))
        return chunks
    rows = int(workspace_bytes // per_row) // block * block
    for e in range(E):
        for n0 in range(0, N, rows):
            chunks.append((e, e + 1, n0, min(N, n0 + rows)))
    return chunks


def _tile_max_exponent(scale: torch.Tensor, block: int) -> torch.Tensor:
    """Largest E8M0 byte per (block x block) tile: [e, n, k/32] -> [e, nt, kt]."""
    e, n, g = scale.shape
    gpt = block // MXFP8_GROUP  # groups per tile along K
    nt, kt = -(-n // block), -(-g // gpt)
    if n != nt * block or g != kt * gpt:
        # Pad with E8M0 byte 0, the smallest exponent: neutral for the max.
        scale = torch.nn.functional.pad(scale, (0, kt * gpt - g, 0, nt * block - n))
    return scale.reshape(e, nt, block, kt, gpt).amax(dim=(2, 4))


def _scale_from_exponent(t: torch.Tensor, fnuz: bool) -> torch.Tensor:
    # 2**(t - 127) exactly (t = 0 gives the fp32 subnormal 2**-127); FNUZ bits
    # are worth half, hence one more power of two.
    return torch.exp2(t.to(torch.float64) - (126 if fnuz else 127)).to(torch.float32)


def _convert_chunk_torch(
    w: torch.Tensor,
    s: torch.Tensor,
    out: torch.Tensor,
    out_scale: torch.Tensor,
    fp8_dtype: torch.dtype,
    block: int,
    rule: str,
) -> None:
    """Convert one chunk. w [e, n, K] fp8, s [e, n, K/32] uint8, out same shape
    as w (fp8_dtype), out_scale [e, ceil(n/block), ceil(K/block)] fp32."""
    e, n, K = w.shape
    g = K // MXFP8_GROUP
    fnuz = fp8_dtype == torch.float8_e4m3fnuz
    if bool((s == _E8M0_NAN).any()):
        raise ValueError("MXFP8 scale contains E8M0 NaN (byte 255); refusing to convert.")
    wf = w.to(torch.float32)
    if bool(torch.isnan(wf).any()):
        raise ValueError(
            "MXFP8 weight contains NaN (E4M3FN 0x7F/0xFF); refusing to convert "
            "a corrupt checkpoint to block FP8."
        )
    t = _tile_max_exponent(s, block).to(torch.int32)  # [e, nt, kt]
    gpt = block // MXFP8_GROUP
    # Tile exponent broadcast back to each 1x32 group.
    t_g = t.repeat_interleave(block, dim=1)[:, :n].repeat_interleave(gpt, dim=2)[:, :, :g]
    shift = s.to(torch.int32) - t_g  # <= 0
    wf = wf.view(e, n, g, MXFP8_GROUP)
    if rule == "pow2":
        # Exact power-of-two scaling in fp32, then one RNE rounding to E4M3FN.
        # Values never exceed 448 (shift <= 0), so no clamp is needed.
        # Shifts below -160 flush to 0 either way; clamp keeps exp2 finite.
        wf.mul_(torch.exp2(shift.clamp_min(-160).to(torch.float32)).unsqueeze(-1))
        scale = _scale_from_exponent(t, fnuz)
        if fnuz and bool((t >= _FNUZ_SCALE_OVERFLOW_E).any()):
            # 2**(254-126) overflows fp32: keep the scale at 2**127 for those
            # tiles and saturate their elements at the FNUZ max (240).
            hi = t >= _FNUZ_SCALE_OVERFLOW_E
            scale = torch.where(hi, torch.tensor(2.0**127), scale)
            hi_g = hi.repeat_interleave(block, dim=1)[:, :n].repeat_interleave(
                gpt, dim=2
            )[:, :, :g].unsqueeze(-1)
            # With scale 2**127 the FNUZ value is w * 2**(e - 254) = wf here;
            # it is rounded directly to FNUZ (saturating at 240) below.
            direct = torch.where(hi_g, wf, torch.zeros((), dtype=wf.dtype))
            wf = torch.where(hi_g, torch.zeros((), dtype=wf.dtype), wf)
        else:
            direct = None
    elif rule == "amax":
        wf.mul_(torch.exp2(shift.clamp_min(-160).to(torch.float32)).unsqueeze(-1))
        wf4 = wf.view(e, n, K)
        amax_rel = _tile_amax(wf4, block)  # in units of 2**(t-127)
        ratio = torch.where(amax_rel > 0, amax_rel / 448.0, torch.ones_like(amax_rel))
        ratio_g = ratio.repeat_interleave(block, dim=1)[:, :n].repeat_interleave(
            gpt, dim=2
        )[:, :, :g]
        wf.div_(ratio_g.unsqueeze(-1)).clamp_(-448.0, 448.0)
        scale64 = ratio.to(torch.float64) * torch.exp2(
            t.to(torch.float64) - (126 if fnuz else 127)
        )
        scale = scale64.clamp(max=torch.finfo(torch.float32).max).to(torch.float32)
        direct = None
    else:
        raise ValueError(f"unknown rounding rule {rule!r} (expected 'pow2' or 'amax')")

    q = wf.view(e, n, K).to(torch.float8_e4m3fn).view(torch.uint8)
    # Never emit 0x80: FN -0 is FNUZ NaN. All zeros become +0 (same value).
    q = q.masked_fill_(q == 0x80, 0)
    if direct is not None:
        dq = direct.view(e, n, K).clamp_(-240.0, 240.0).to(torch.float8_e4m3fnuz)
        dq = dq.view(torch.uint8)
        q = torch.where(hi_g.expand(e, n, g, MXFP8_GROUP).reshape(e, n, K), dq, q)
        q = q.masked_fill_(q == 0x80, 0)
    out.view(torch.uint8).copy_(q)
    out_scale.copy_(scale)


def _tile_amax(x: torch.Tensor, block: int) -> torch.Tensor:
    e, n, K = x.shape
    nt, kt = -(-n // block), -(-K // block)
    xa = x.abs()
    if n != nt * block or K != kt * block:
        xa = torch.nn.functional.pad(xa, (0, kt * block - K, 0, nt * block - n))
    return xa.reshape(e, nt, block, kt, block).amax(dim=(2, 4))


# --------------------------------------------------------------------------
# Triton path (GPU only, optional).  One program converts one 128x128 tile:
# it loads the tile's 128x4 E8M0 bytes and 16 KiB of weights once, takes the
# tile max exponent t, and computes every element arithmetically:
#   y = fp16(w) * 2**(s - t)   (exact: both factors are powers of two times
#                               <= 4 significant bits; results below 2**-14,
#                               where fp16 would round, all become 0 in E4M3)
#   q = E4M3FN(y) rounded to nearest even, 0x80 -> 0x00
# which is the torch path's rule bit for bit (the bench checks all 256 bytes x
# all exponent shifts against the torch path on the GPU).  Decoding:
#   HW_FP8 (CUDA): bitcast to fp8e4nv and cast to fp16 (cvt e4m3x2 -> f16x2 on
#     sm_89+), round back with the fp16 -> fp8e4nv cast (cvt.rn.satfinite).
#   otherwise (ROCm): integer decode (the E4M3 bits shifted into an fp16 are
#     worth 2**-8 of the value, folded into the multiplier).  On FNUZ devices
#     the result is rounded with the native fp16 -> fp8e4b8 cast of y / 2 (the
#     same bits, since FNUZ bits are worth half), else with the fp8e4nv cast,
#     which Triton may emulate in software on devices without OCP FP8.
# NaN weights (|byte| = 0x7F) and E8M0 NaN (255) set bits of a flag word.
# --------------------------------------------------------------------------
_TRITON_KERNEL = None
_TRITON_FAILED = False
# Launch configuration (private; the bench sweeps it).  "hw_fp8": None = CUDA.
_TRITON_CFG: dict = {"sub": 128, "num_warps": 4, "hw_fp8": None, "stream": False}


def _get_triton_kernel():
    global _TRITON_KERNEL, _TRITON_FAILED
    if _TRITON_KERNEL is not None or _TRITON_FAILED:
        return _TRITON_KERNEL
    try:
        import triton
        import triton.language as tl
    except Exception:  # pragma: no cover - depends on the install
        _TRITON_FAILED = True
        return None

    @triton.jit
    def _mxfp8_to_block_fp8_kernel(
        w_ptr,
        s_ptr,
        out_ptr,
        scale_ptr,
        flag_ptr,
        N,
        K,
        G,
        NT,
        KT,
        FNUZ: tl.constexpr,
        BLOCK: tl.constexpr,
        GPT: tl.constexpr,
        SUB: tl.constexpr,
        HW_FP8: tl.constexpr,
        FNUZ_CAST: tl.constexpr,
        MUL_OFF: tl.constexpr,
        EVEN: tl.constexpr,
        EVICT: tl.constexpr,
        STORE_CM: tl.constexpr,
    ):
        pid_m = tl.program_id(0)  # e * NT + nt
        kt = tl.program_id(1)
        e = pid_m // NT
        nt = pid_m - e * NT
        row0 = nt * BLOCK
        s_base = s_ptr + e.to(tl.int64) * N * G
        w_base = w_ptr + e.to(tl.int64) * N * K
        o_base = out_ptr + e.to(tl.int64) * N * K
        gcol = kt * GPT + tl.arange(0, GPT)
        j = tl.arange(0, 32)
        colo = gcol[None, :, None] * 32 + j[None, None, :]  # [1, GPT, 32]
        if SUB < BLOCK:
            # Tile max exponent over the BLOCK x GPT scale bytes first.
            rows = row0 + tl.arange(0, BLOCK)
            s_off = rows[:, None] * G + gcol[None, :]
            if EVEN:
                sblk = tl.load(s_base + s_off).to(tl.int32)
            else:
                smask = (rows[:, None] < N) & (gcol[None, :] < G)
                sblk = tl.load(s_base + s_off, mask=smask, other=0).to(tl.int32)
            t = tl.max(tl.max(sblk, axis=1), axis=0)
        else:
            t = 0
        nanacc = tl.zeros((SUB, GPT, 32), dtype=tl.uint8)
        for r0 in tl.static_range(0, BLOCK, SUB):
            # Loads first (weights before the scale reduction, so they are in
            # flight while the tile max is computed).
            rr = row0 + r0 + tl.arange(0, SUB)
            off = rr[:, None, None] * K + colo
            if EVEN:
                b = tl.load(w_base + off, eviction_policy=EVICT)
                s = tl.load(s_base + rr[:, None] * G + gcol[None, :]).to(tl.int32)
            else:
                m3 = (rr[:, None, None] < N) & (colo < K)
                b = tl.load(w_base + off, mask=m3, other=0, eviction_policy=EVICT)
                s = tl.load(
                    s_base + rr[:, None] * G + gcol[None, :],
                    mask=(rr[:, None] < N) & (gcol[None, :] < G),
                    other=0,
                ).to(tl.int32)
            if SUB == BLOCK:
                t = tl.max(tl.max(s, axis=1), axis=0)
            # Multiplier 2**(s - t + MUL_OFF) as fp16 bits (0 below 2**-24).
            d = s - t + MUL_OFF
            mb = tl.where(
                d >= -14,
                (d + 15) << 10,
                tl.where(d >= -24, 1 << (tl.minimum(tl.maximum(d, -24), -15) + 24), 0),
            )
            m = mb.to(tl.int16).to(tl.float16, bitcast=True)
            if HW_FP8:
                x = b.to(tl.float8e4nv, bitcast=True).to(tl.float16)
            else:
                bi = b.to(tl.int32)
                hb = ((bi & 0x80) << 8) | ((bi & 0x7F) << 7)
                x = hb.to(tl.int16).to(tl.float16, bitcast=True)
            y = x * m[:, :, None]
            if FNUZ_CAST:
                q = y.to(tl.float8e4b8).to(tl.uint8, bitcast=True)
            else:
                q = y.to(tl.float8e4nv).to(tl.uint8, bitcast=True)
            q = tl.where(q == 0x80, 0, q)
            nanacc = tl.maximum(nanacc, b & 0x7F)
            if EVEN:
                tl.store(o_base + off, q, cache_modifier=STORE_CM)
            else:
                tl.store(o_base + off, q, mask=m3, cache_modifier=STORE_CM)
        flags = tl.where(t == 255, 2, 0)
        if FNUZ:
            flags = flags | tl.where(t >= 254, 4, 0)
            sbits = (t + 1) << 23
        else:
            sbits = tl.where(t == 0, 0x400000, t << 23)
        tl.store(scale_ptr + pid_m.to(tl.int64) * KT + kt, sbits.to(tl.float32, bitcast=True))
        nan = tl.max(tl.max(tl.max(nanacc, axis=2), axis=1), axis=0)
        flags = flags | tl.where(nan == 0x7F, 1, 0)
        if flags != 0:
            tl.atomic_or(flag_ptr, flags)

    _TRITON_KERNEL = _mxfp8_to_block_fp8_kernel
    return _TRITON_KERNEL


def _launch_triton(w, s, out, out_scale, fp8_dtype, block, flag) -> None:
    """Launch the fused kernel once: no allocation, no read-back (``flag`` collects the
    NaN/overflow bits). ``bench/bench_convert.py`` times exactly this."""
    kernel = _get_triton_kernel()
    E, N, K = w.shape
    G = K // MXFP8_GROUP
    NT, KT = -(-N // block), -(-K // block)
    if N * K >= 2**31 or N * G >= 2**31:
        raise RuntimeError("expert too large for 32-bit offsets")
    cfg = _TRITON_CFG
    hw = cfg["hw_fp8"]
    if hw is None:
        hw = torch.version.hip is None
    fnuz_cast = (not hw) and fp8_dtype == torch.float8_e4m3fnuz
    kernel[(E * NT, KT)](
        w.view(torch.uint8),
        s,
        out.view(torch.uint8),
        out_scale,
        flag,
        N,
        K,
        G,
        NT,
        KT,
        FNUZ=fp8_dtype == torch.float8_e4m3fnuz,
        BLOCK=block,
        GPT=block // MXFP8_GROUP,
        SUB=min(cfg["sub"], block),
        HW_FP8=hw,
        FNUZ_CAST=fnuz_cast,
        MUL_OFF=(0 if hw else 8) - (1 if fnuz_cast else 0),
        EVEN=(N % block == 0) and (K % block == 0),
        EVICT="evict_first" if cfg["stream"] else "",
        STORE_CM=".cs" if cfg["stream"] else "",
        num_warps=cfg["num_warps"],
    )


def _convert_triton(w, s, out, out_scale, fp8_dtype, block) -> bool:
    """Fused GPU conversion. Returns False if the caller must redo it with the
    torch path (FNUZ tiles whose exponent would overflow the fp32 scale)."""
    flag = torch.zeros(1, dtype=torch.int32, device=w.device)
    _launch_triton(w, s, out, out_scale, fp8_dtype, block, flag)
    f = int(flag.item())
    if f & 1:
        raise ValueError(
            "MXFP8 weight contains NaN (E4M3FN 0x7F/0xFF); refusing to convert "
            "a corrupt checkpoint to block FP8."
        )
    if f & 2:
        raise ValueError("MXFP8 scale contains E8M0 NaN (byte 255); refusing to convert.")
    return not (f & 4)


def convert_mxfp8_to_block_fp8(
    weight: torch.Tensor,
    scale_e8m0: torch.Tensor,
    *,
    fp8_dtype: torch.dtype,
    block_size: int = 128,
    workspace_bytes: int = 256 * 2**20,
    rule: str = "pow2",
    impl: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Convert MXFP8 ``weight`` [E, N, K] (float8_e4m3fn) with E8M0 ``scale_e8m0``
    [E, N, K/32] (uint8) to block FP8: ``(w [E, N, K] fp8_dtype,
    scale [E, ceil(N/block), ceil(K/block)] float32)``.

    ``workspace_bytes`` caps the temporaries of the torch path (it converts in
    chunks of experts / tile rows); the Triton path needs none beyond a flag.
    ``impl``: "auto" (Triton on GPU when available, else torch), "torch",
    "triton".  Raises ValueError on NaN weights/scales or K % 32 != 0.
    """
    E, N, K = _check_inputs(weight, scale_e8m0, fp8_dtype, block_size)
    if rule not in ("pow2", "amax"):
        raise ValueError(f"unknown rounding rule {rule!r} (expected 'pow2' or 'amax')")
    weight = weight.contiguous()
    scale_e8m0 = scale_e8m0.contiguous()
    out = torch.empty((E, N, K), dtype=fp8_dtype, device=weight.device)
    out_scale = torch.empty(
        (E, -(-N // block_size), -(-K // block_size)),
        dtype=torch.float32,
        device=weight.device,
    )
    if E == 0 or N == 0 or K == 0:
        return out, out_scale

    use_triton = (
        impl in ("auto", "triton")
        and weight.is_cuda
        and rule == "pow2"
        and _get_triton_kernel() is not None
    )
    if impl == "triton" and not use_triton:
        raise RuntimeError("Triton conversion requested but unavailable")
    if use_triton:
        try:
            if _convert_triton(weight, scale_e8m0, out, out_scale, fp8_dtype, block_size):
                return out, out_scale
        except ValueError:
            raise
        except Exception as exc:  # pragma: no cover - GPU/compiler specific
            if impl == "triton":
                raise
            _log.warning("Triton MXFP8->block-FP8 conversion failed (%s); using torch.", exc)

    bpe = _TORCH_WS_BYTES_PER_ELEM if rule == "pow2" else _TORCH_WS_BYTES_PER_ELEM_AMAX
    for e0, e1, n0, n1 in plan_chunks(E, N, K, workspace_bytes, bpe, block_size):
        nt0, nt1 = n0 // block_size, -(-n1 // block_size)
        _convert_chunk_torch(
            weight[e0:e1, n0:n1],
            scale_e8m0[e0:e1, n0:n1],
            out[e0:e1, n0:n1],
            out_scale[e0:e1, nt0:nt1],
            fp8_dtype,
            block_size,
            rule,
        )
    return out, out_scale


def dequant_mxfp8(
    weight: torch.Tensor, scale_e8m0: torch.Tensor, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """Reference MXFP8 dequant: w * 2**(e - 127) (float64 by default so that the
    extreme E8M0 exponents do not overflow)."""
    wf = weight.to(torch.float32).to(dtype)
    *lead, K = wf.shape
    sc = torch.exp2(scale_e8m0.to(dtype) - 127.0)
    return (wf.view(*lead, K // MXFP8_GROUP, MXFP8_GROUP) * sc.unsqueeze(-1)).view(
        *lead, K
    )


def dequant_block_fp8(
    weight: torch.Tensor,
    scale: torch.Tensor,
    block_size: int = 128,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """Reference block-FP8 dequant: w * scale[tile] (any FP8 dtype)."""
    wf = weight.to(torch.float32).to(dtype)
    n, k = wf.shape[-2:]
    sc = scale.to(dtype).repeat_interleave(block_size, dim=-2)[..., :n, :]
    sc = sc.repeat_interleave(block_size, dim=-1)[..., :k]
    return wf * sc
