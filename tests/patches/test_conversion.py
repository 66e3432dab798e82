"""MXFP8 -> 128x128 block-FP8 conversion, checked against independent references.

The module under test is imported directly from patches/src (patch 0001 is generated from it;
tests/patches/test_regen.py proves the two agree and that the patched tree holds the same bytes)."""

from __future__ import annotations

import math

import pytest
import torch

FN, FNUZ = torch.float8_e4m3fn, torch.float8_e4m3fnuz
# Stated error bound of the pow2 rule, per element: half the smallest E4M3FN
# subnormal of the tile, i.e. 2**-10 * 2**(max_e8m0 - 127).
BOUND_UNITS = 2.0**-10


# ---------------- independent references (pure python) ----------------------
def fn_value(b: int) -> float:
    """E4M3FN byte -> value (bias 7; 0x7F/0xFF NaN)."""
    s = -1.0 if b & 0x80 else 1.0
    e, m = (b >> 3) & 0xF, b & 7
    if e == 15 and m == 7:
        return math.nan
    return s * (m / 8 * 2.0**-6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))


def fnuz_value(b: int) -> float:
    """E4M3FNUZ byte -> value (bias 8; 0x80 the only NaN)."""
    if b == 0x80:
        return math.nan
    s = -1.0 if b & 0x80 else 1.0
    e, m = (b >> 3) & 0xF, b & 7
    return s * (m / 8 * 2.0**-7 if e == 0 else (1 + m / 8) * 2.0 ** (e - 8))


_POS = sorted((fn_value(b), b) for b in range(0x7F))  # finite non-negative FN


def fn_round(x: float) -> int:
    """Round to nearest E4M3FN byte, ties to even mantissa; |x| <= 448 here."""
    a = abs(x)
    best = min(_POS, key=lambda vb: (abs(vb[0] - a), vb[1] & 1))
    return 0 if best[1] == 0 else best[1] | (0x80 if x < 0 else 0)


def mx_quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """OCP MX quantization of x [E, N, K]: E8M0 = floor(log2(amax)) - 8 + 127."""
    E, N, K = x.shape
    g = x.reshape(E, N, K // 32, 32)
    amax = g.abs().amax(-1).clamp_min(2.0**-120)
    ex = torch.floor(torch.log2(amax)) - 8
    s = (ex + 127).clamp(0, 254).to(torch.uint8)
    w = (g / torch.exp2(s.double() - 127).unsqueeze(-1)).clamp(-448, 448)
    return w.reshape(E, N, K).to(FN), s


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


# ---------------- tests ------------------------------------------------------
def test_all_256_fn_bytes_reencode_to_fnuz_exactly(conv):
    nan_bytes = {0x7F, 0xFF}
    good = [b for b in range(256) if b not in nan_bytes]  # 254 bytes
    w = torch.tensor(good * 2, dtype=torch.uint8)[: 256 * 2 - 4]
    w = torch.nn.functional.pad(w, (0, 512 - w.numel())).view(1, 2, 256).view(FN)
    s = torch.full((1, 2, 8), 127, dtype=torch.uint8)
    for dt, val in ((FNUZ, fnuz_value), (FN, fn_value)):
        q, sc = conv.convert_mxfp8_to_block_fp8(w, s, fp8_dtype=dt)
        assert q.dtype == dt and sc.shape == (1, 1, 2)
        assert sc.flatten().tolist() == [2.0 if dt == FNUZ else 1.0] * 2
        qb = q.view(torch.uint8).flatten().tolist()
        for bi, bo in zip(w.view(torch.uint8).flatten().tolist(), qb, strict=True):
            assert bo != 0x80
            assert val(bo) * float(sc[0, 0, 0]) == fn_value(bi)  # exact
            assert bo == (0 if bi == 0x80 else bi)  # same bits, -0 -> +0
    # and the NaN bytes are rejected with a clear error
    for b in nan_bytes:
        bad = torch.zeros(1, 1, 32, dtype=torch.uint8)
        bad[0, 0, 5] = b
        with pytest.raises(ValueError, match="NaN"):
            conv.convert_mxfp8_to_block_fp8(
                bad.view(FN), torch.full((1, 1, 1), 127, dtype=torch.uint8), fp8_dtype=FNUZ
            )


@pytest.mark.parametrize("dt", [FN, FNUZ])
@pytest.mark.parametrize("shape", [(2, 128, 256), (1, 200, 160), (3, 130, 96)])
def test_scale_and_bytes_bit_exact_vs_reference(conv, dt, shape):
    """Tile scale and every output byte against a pure-python reference, with
    padding (N, K not multiples of 128) and mixed exponents incl. 0 and 254."""
    E, N, K = shape
    g = torch.Generator().manual_seed(1)
    wb = torch.randint(0, 256, (E, N, K), generator=g, dtype=torch.uint8)
    wb[(wb & 0x7F) == 0x7F] = 0x3C  # no NaN
    s = torch.randint(118, 132, (E, N, K // 32), generator=g, dtype=torch.uint8)
    s[0, 0, 0] = 0
    s[-1, -1, -1] = 254 if dt == FN else 253  # FNUZ 254 is tested separately
    q, sc = conv.convert_mxfp8_to_block_fp8(wb.view(FN), s, fp8_dtype=dt)
    assert sc.shape == (E, -(-N // 128), -(-K // 128)) and sc.dtype == torch.float32
    qb, wl, sl = q.view(torch.uint8).tolist(), wb.tolist(), s.tolist()
    for e in range(E):
        for nt in range(sc.shape[1]):
            for kt in range(sc.shape[2]):
                rows = range(nt * 128, min(N, nt * 128 + 128))
                gcols = range(kt * 4, min(K // 32, kt * 4 + 4))
                t = max(sl[e][n][c] for n in rows for c in gcols)
                want = math.ldexp(1.0, t - (126 if dt == FNUZ else 127))
                assert sc[e, nt, kt].item() == want  # bit-exact power of two
                for n in rows:
                    for k in range(kt * 128, min(K, kt * 128 + 128)):
                        x = fn_value(wl[e][n][k]) * 2.0 ** (sl[e][n][k // 32] - t)
                        assert qb[e][n][k] == fn_round(x), (e, n, k)


def _check_error(conv, w, s, dt):
    q, sc = conv.convert_mxfp8_to_block_fp8(w, s, fp8_dtype=dt)
    ref = conv.dequant_mxfp8(w, s)
    got = conv.dequant_block_fp8(q, sc)
    tile_unit = sc.double() / (2.0 if dt == FNUZ else 1.0)  # 2**(t-127)
    bound = (
        conv.dequant_block_fp8(torch.ones_like(q, dtype=torch.float32).to(dt), tile_unit)
        * BOUND_UNITS
    )
    assert bool(((got - ref).abs() <= bound).all())
    return rel_err(got, ref)


@pytest.mark.parametrize("dt", [FN, FNUZ])
def test_error_random_mx_data(conv, dt):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 384, 512, generator=g) * 0.02
    w, s = mx_quantize(x)
    err = _check_error(conv, w, s, dt)
    assert err < 1e-6, err  # measured ~1e-7: only E4M3 subnormals re-rounded


@pytest.mark.parametrize("dt", [FN, FNUZ])
def test_error_adversarial_mixed_exponents(conv, dt):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 256, 512, generator=g)
    # every 1x32 group gets its own magnitude, spread over 2**-12 .. 2**12
    x = x * torch.exp2(torch.randint(-12, 13, (2, 256, 16, 1), generator=g).float()).expand(
        2, 256, 16, 32
    ).reshape(2, 256, 512)
    w, s = mx_quantize(x)
    err = _check_error(conv, w, s, dt)
    assert err < 2e-2, err
    # versus the "amax" rule (every element re-rounded): pow2 is not worse
    q, sc = conv.convert_mxfp8_to_block_fp8(w, s, fp8_dtype=dt, rule="amax")
    amax_err = rel_err(conv.dequant_block_fp8(q, sc), conv.dequant_mxfp8(w, s))
    assert err <= amax_err


@pytest.mark.parametrize("dt", [FN, FNUZ])
def test_zero_tiles_and_extreme_e8m0(conv, dt):
    w = torch.zeros(3, 128, 128, dtype=torch.uint8).view(FN)
    s = torch.zeros(3, 128, 4, dtype=torch.uint8)
    s[1] = 254
    s[2] = 127
    q, sc = conv.convert_mxfp8_to_block_fp8(w, s, fp8_dtype=dt)
    assert bool((q.view(torch.uint8) == 0).all())
    assert bool(torch.isfinite(sc).all()) and bool((sc > 0).all())
    lo = 2.0**-126 if dt == FNUZ else 2.0**-127
    assert sc[0, 0, 0].item() == lo and sc[1, 0, 0].item() == 2.0**127


def test_e8m0_254_fnuz_saturates_at_240(conv):
    """2**(254-126) is not an fp32 number: FNUZ tiles with E8M0 254 keep scale
    2**127 and saturate elements above 240 (FN values 256..448)."""
    vals = torch.tensor([1.0, -3.5, 240.0, 256.0, -448.0, 0.0] + [0.0] * 26)
    w = vals.to(FN).view(1, 1, 32)
    s = torch.full((1, 1, 1), 254, dtype=torch.uint8)
    q, sc = conv.convert_mxfp8_to_block_fp8(w, s, fp8_dtype=FNUZ)
    assert sc.item() == 2.0**127
    assert q.float()[0, 0, :6].tolist() == [1.0, -3.5, 240.0, 240.0, -240.0, 0.0]
    assert 0x80 not in q.view(torch.uint8).flatten().tolist()


def test_rejects_bad_inputs(conv):
    w = torch.zeros(1, 4, 48, dtype=FN)
    with pytest.raises(ValueError, match="not a multiple of the MX group size 32"):
        conv.convert_mxfp8_to_block_fp8(w, torch.zeros(1, 4, 1, dtype=torch.uint8), fp8_dtype=FNUZ)
    w = torch.zeros(1, 4, 64, dtype=FN)
    s = torch.full((1, 4, 2), 255, dtype=torch.uint8)
    with pytest.raises(ValueError, match="E8M0 NaN"):
        conv.convert_mxfp8_to_block_fp8(w, s, fp8_dtype=FN)
    x = torch.zeros(1, 4, 64)
    x[0, 2, 7] = float("nan")
    with pytest.raises(ValueError, match="contains NaN"):
        conv.convert_mxfp8_to_block_fp8(x.to(FN), s.fill_(127), fp8_dtype=FN)


def test_chunked_workspace_cap(conv):
    cap = 256 * 2**20
    # MiniMax-M3 full layer (E=128) and EP8 (E=16): w13 [E, 6144, 6144], w2 [E, 6144, 3072]
    for E in (128, 16):
        for N, K in ((6144, 6144), (6144, 3072)):
            chunks = conv.plan_chunks(E, N, K, cap, conv._TORCH_WS_BYTES_PER_ELEM, 128)
            covered = sum((e1 - e0) * (n1 - n0) for e0, e1, n0, n1 in chunks)
            assert covered == E * N
            for e0, e1, n0, n1 in chunks:
                assert (e1 - e0) * (n1 - n0) * K * conv._TORCH_WS_BYTES_PER_ELEM <= cap
                assert n0 % 128 == 0
    # a tiny cap forces row chunks inside experts: same bytes as one shot
    g = torch.Generator().manual_seed(4)
    w, s = mx_quantize(torch.randn(3, 300, 256, generator=g))
    ref_q, ref_s = conv.convert_mxfp8_to_block_fp8(w, s, fp8_dtype=FNUZ)
    small = 128 * 256 * conv._TORCH_WS_BYTES_PER_ELEM
    assert len(conv.plan_chunks(3, 300, 256, small, conv._TORCH_WS_BYTES_PER_ELEM, 128)) == 9
    q, sc = conv.convert_mxfp8_to_block_fp8(w, s, fp8_dtype=FNUZ, workspace_bytes=small)
    assert torch.equal(q.view(torch.uint8), ref_q.view(torch.uint8))
    assert torch.equal(sc, ref_s)
    with pytest.raises(ValueError, match="too small"):
        conv.convert_mxfp8_to_block_fp8(w, s, fp8_dtype=FNUZ, workspace_bytes=1024)
