"""MiniMax-M3-shaped MoE numerics: converted block-FP8 path vs the MI355X native
MXFP8 path (golden), and both vs a BF16 reference.

Everything here is torch-only and runs on CPU. Inputs come from an integer hash
(no torch RNG), so the problem is bit-identical on every torch build and host;
its sha256 is stored in the golden file and checked before comparing outputs.

Paths (all with SwiGLU-OAI on the split gate/up layout, top-4 routing):

* native MXFP8 (MI355X, ``fused_moe_mxfp8_native``): MXFP8 weights (E4M3FN, E8M0
  per 1x32), activations MXFP8-quantized with vLLM's rule (E8M0 = floor(log2
  amax)), fp32 accumulation; GEMM1 out in BF16; SwiGLU fp32 fused with the
  MXFP8 quant; GEMM2 fp32 x router weight; fp32 top-k sum; BF16 out. The CPU
  emulation dequantizes exactly (every E4M3 x 2^k value is exact in fp32) and
  accumulates in fp64, i.e. the exact result of the fp32 MAC up to summation
  order.
* converted block FP8 (MI300X, Triton ``fused_moe`` with block_shape [128,128]):
  weights from the image's ``convert_mxfp8_to_block_fp8`` (E4M3FNUZ, fp32 scale
  per 128x128), activations per-token 1x128 FP8 (scale amax/224 on FNUZ, as
  vLLM's ``per_token_group_quant_fp8``), fp32 accumulation; GEMM1 out BF16;
  SwiGLU BF16 out; GEMM2 x router weight BF16; top-k sum; BF16 out.
* BF16 reference: the MXFP8 weights dequantized (exact in BF16), activations
  unquantized, fp64 accumulation.
"""

from __future__ import annotations

import hashlib
import math

import torch

M3 = {
    "hidden": 6144,  # MiniMax-M3 hidden size
    "inter": 384,  # MoE intermediate 3072 / TP8 (the E=128,N=384 table's N)
    "experts": 8,  # a CPU-sized subset of the 128 experts
    "top_k": 4,
    "tokens": 16,
    "alpha": 1.702,
    "beta": 1.0,
    "limit": 7.0,
    "seed": 3,
    "weight_std": 0.02,
    "act_outlier": 8.0,
}
PROBLEM_VERSION = 2  # 2: per-128x128-tile magnitude spread (TILE_SCALES)

MASK32 = 0xFFFFFFFF
FN_MAX = 448.0
FNUZ_DYN_MAX = 224.0  # vLLM's dynamic-quant clamp on FNUZ
FN_DYN_MAX = 448.0


# ------------------------------------------------------------------ inputs


def _hash_u32(idx: torch.Tensor, salt: int) -> torch.Tensor:
    h = (idx * 0x9E3779B1 + (salt * 0x85EBCA6B & MASK32)) & MASK32
    for _ in range(2):
        h = h ^ (h >> 16)
        h = (h * 0x45D9F3B) & MASK32
    return h ^ (h >> 16)


def _normal(shape, salt: int, device="cpu") -> torch.Tensor:
    """Zero-mean, unit-variance noise (float32) from one 32-bit hash per element:
    the sum of its two 16-bit halves (triangular). Integer and exact float ops
    only, so it is bit-identical on every torch build and device."""
    n = math.prod(shape)
    h = _hash_u32(torch.arange(n, dtype=torch.int64, device=device), salt)
    u = ((h >> 16) + (h & 0xFFFF)).to(torch.float32) * (1.0 / 65536.0)
    return ((u - 1.0) * 2.4494898).view(*shape)


def _pick(shape, salt: int, table, device="cpu") -> torch.Tensor:
    h = _hash_u32(torch.arange(math.prod(shape), dtype=torch.int64, device=device), salt)
    return torch.tensor(table, dtype=torch.float32, device=device)[h % len(table)].view(*shape)


def mx_quantize_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """OCP MX rule (checkpoint side): X = 2^(floor(log2 amax) - 8), saturate to 448."""
    *lead, K = w.shape
    blocks = w.to(torch.float32).reshape(*lead, K // 32, 32)
    amax = blocks.abs().amax(-1).clamp(min=2.0**-100)
    _, ex = torch.frexp(amax)  # amax = m * 2^ex, m in [0.5, 1): floor(log2) = ex - 1
    e = (ex - 1 - 8).clamp(-127, 127)
    q = (blocks * torch.exp2(-e.to(torch.float32)).unsqueeze(-1)).clamp(-FN_MAX, FN_MAX)
    return q.reshape(*lead, K).to(torch.float8_e4m3fn), (e + 127).to(torch.uint8)


ROW_SCALES = (0.5, 0.75, 1.0, 1.0, 1.5, 2.0)
BLOCK_BOOST = (1.0,) * 31 + (8.0,)  # ~3% of 32-blocks carry 8x larger weights
# Each 128x128 tile gets its own magnitude (2^-3 .. 2^3), so the tile scales differ
# from tile to tile: a scale grid read in the wrong layout, or one tile's scale off
# by a power of two, changes the dequantized weights measurably.
TILE_SCALES = (0.125, 0.25, 0.5, 1.0, 1.0, 2.0, 4.0, 8.0)


def make_problem(p: dict = M3, device="cpu") -> dict:
    H, inter, E, K, T, s = p["hidden"], p["inter"], p["experts"], p["top_k"], p["tokens"], p["seed"]
    salt = s * 1000

    # expert weights with per-tile and per-row magnitude spread and some outlier
    # 32-blocks, so the E8M0 scales inside one 128x128 block differ (what the
    # conversion must handle) and the tile scales differ from tile to tile
    def weight(shape, k):
        w = _normal(shape, salt + k, device)
        w *= _pick(shape[:-1], salt + k + 100, ROW_SCALES, device).unsqueeze(-1) * p["weight_std"]
        boost = _pick(shape[:-1] + (shape[-1] // 32,), salt + k + 200, BLOCK_BOOST, device)
        w.view(*shape[:-1], shape[-1] // 32, 32).mul_(boost.unsqueeze(-1))
        e, n, c = shape
        tiles = _pick((e, -(-n // 128), -(-c // 128)), salt + k + 300, TILE_SCALES, device)
        w.mul_(tiles.repeat_interleave(128, 1)[:, :n].repeat_interleave(128, 2)[:, :, :c])
        return w

    w13_q, w13_s = mx_quantize_weight(weight((E, 2 * inter, H), 1))
    w2_q, w2_s = mx_quantize_weight(weight((E, H, inter), 2))
    x = _normal((T, H), salt + 3, device)
    x[:, 7::997] *= p["act_outlier"]  # a few large-activation channels
    x = x.to(torch.bfloat16)
    # routing: top-k of hashed logits, weights = hashed positive values, renormalized
    logits = _normal((T, E), salt + 4, device)
    tid = torch.topk(logits, K, dim=-1).indices
    v = 1.0 + _pick((T, K), salt + 5, tuple(i / 8 for i in range(8)), device)
    tot = v[:, 0] + v[:, 1] + v[:, 2] + v[:, 3] if K == 4 else v.sum(-1)
    tw = v / tot.unsqueeze(-1)
    return {
        "hidden": x,
        "w13": w13_q,
        "w13_scale": w13_s,
        "w2": w2_q,
        "w2_scale": w2_s,
        "topk_weights": tw.to(torch.float32),
        "topk_ids": tid.to(torch.int32),
        "params": dict(p),
    }


def tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().contiguous().cpu()
    flat = (
        t.view(torch.uint8).reshape(-1)
        if t.element_size() == 1
        else t.reshape(-1).view(torch.uint8)
    )
    buf = bytearray(flat.numel())
    torch.frombuffer(buf, dtype=torch.uint8).copy_(flat)
    return bytes(buf)


def inputs_sha256(prob: dict) -> str:
    h = hashlib.sha256()
    for k in ("hidden", "w13", "w13_scale", "w2", "w2_scale", "topk_weights", "topk_ids"):
        h.update(k.encode())
        h.update(tensor_bytes(prob[k]))
    return h.hexdigest()


# ------------------------------------------------------------------ helpers


def dequant_mx(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return q.to(torch.float64) * torch.exp2(s.to(torch.float64) - 127.0).repeat_interleave(32, -1)


def mx_quantize_act_vllm(x: torch.Tensor) -> torch.Tensor:
    """vLLM's MXFP8 activation quant (E8M0 = floor(log2 amax)), returned dequantized."""
    M, K = x.shape
    xb = x.to(torch.float32).view(M, K // 32, 32)
    amax = xb.abs().amax(-1).clamp(min=torch.finfo(torch.float32).tiny)
    sb = (torch.floor(torch.log2(amax)) + 127.0).clamp(0, 254)
    descale = torch.exp2(sb - 127.0)
    q = (xb / descale.unsqueeze(-1)).to(torch.float8_e4m3fn)
    return (q.to(torch.float64) * descale.to(torch.float64).unsqueeze(-1)).view(M, K)


def swiglu_oai(g: torch.Tensor, alpha: float, beta: float, limit: float | None) -> torch.Tensor:
    """vLLM 0.24.0 ``swiglu_oai_split``: split layout, fp32."""
    n = g.shape[-1] // 2
    gate, up = g[..., :n].to(torch.float32), g[..., n:].to(torch.float32)
    if limit is not None:
        gate = gate.clamp(max=limit)
        up = up.clamp(-limit, limit)
    return gate * torch.sigmoid(alpha * gate) * (up + beta)


def group_quant_act(
    x: torch.Tensor,
    fp8_dtype: torch.dtype,
    fp8_max: float,
    group: int = 128,
    scale_div: bool = False,
):
    """vLLM ``per_token_group_quant_fp8`` (1x128), returned dequantized in fp64.

    ``scale_div``: the scale as ``amax / fp8_max`` (IEEE division) instead of
    ``amax * (1 / fp8_max)``. The two differ by one ulp for some groups, which moves
    FP8 rounding ties (CPU dry run, FNUZ max 224: 0.0068 between the two); kernels may
    compute either, so device comparisons try both."""
    M, K = x.shape
    xb = x.to(torch.float32).view(M, K // group, group)
    amax = xb.abs().amax(-1).clamp(min=1e-10)
    s = amax / fp8_max if scale_div else amax * (1.0 / fp8_max)
    q = (xb / s.unsqueeze(-1)).clamp(-fp8_max, fp8_max).to(fp8_dtype)
    return (q.to(torch.float64) * s.to(torch.float64).unsqueeze(-1)).view(M, K)


def dequant_block(q: torch.Tensor, s: torch.Tensor, block: int = 128) -> torch.Tensor:
    N, K = q.shape
    full = s.to(torch.float64).repeat_interleave(block, 0)[:N].repeat_interleave(block, 1)[:, :K]
    return q.to(torch.float64) * full


def _routed(prob):
    T, K = prob["topk_ids"].shape
    ids = prob["topk_ids"].reshape(-1).to(torch.int64)
    rows = torch.arange(T, device=ids.device).repeat_interleave(K)
    return ids, rows, prob["topk_weights"].reshape(-1)


def _moe(prob, gemm1, act, gemm2, finish):
    """Generic loop over experts; the callbacks define one path."""
    T, H = prob["hidden"].shape
    ids, rows, tw = _routed(prob)
    out = torch.zeros(ids.numel(), H, dtype=torch.float64, device=ids.device)
    for e in ids.unique().tolist():
        sel = (ids == e).nonzero().flatten()
        g1 = gemm1(e, rows[sel])
        a = act(g1)
        out[sel] = gemm2(e, a, tw[sel]).to(torch.float64)
    return finish(out.view(T, -1, H))


def native_mxfp8_emulated(prob: dict) -> torch.Tensor:
    """Exact CPU emulation of vLLM's ``fused_moe_mxfp8_native`` (MI355X)."""
    p = prob["params"]
    xq = mx_quantize_act_vllm(prob["hidden"])

    def gemm1(e, r):
        w = dequant_mx(prob["w13"][e], prob["w13_scale"][e])
        return (xq[r] @ w.T).to(torch.float32).to(torch.bfloat16)

    def act(g1):
        return mx_quantize_act_vllm(swiglu_oai(g1, p["alpha"], p["beta"], p["limit"]))

    def gemm2(e, a, w):
        w2 = dequant_mx(prob["w2"][e], prob["w2_scale"][e])
        return (a @ w2.T).to(torch.float32) * w.unsqueeze(-1)

    return _moe(prob, gemm1, act, gemm2, lambda o: o.to(torch.float32).sum(1).to(torch.bfloat16))


def bf16_reference(prob: dict) -> torch.Tensor:
    p = prob["params"]
    x = prob["hidden"].to(torch.float64)

    def gemm1(e, r):
        w = dequant_mx(prob["w13"][e], prob["w13_scale"][e])
        return (x[r] @ w.T).to(torch.bfloat16)

    def act(g1):
        return swiglu_oai(g1, p["alpha"], p["beta"], p["limit"]).to(torch.float64)

    def gemm2(e, a, w):
        w2 = dequant_mx(prob["w2"][e], prob["w2_scale"][e])
        return (a @ w2.T) * w.to(torch.float64).unsqueeze(-1)

    return _moe(prob, gemm1, act, gemm2, lambda o: o.sum(1).to(torch.bfloat16))


def convert_weights(prob: dict, convert, fp8_dtype=torch.float8_e4m3fnuz) -> dict:
    """Run the image's conversion on the problem's MXFP8 weights; check its contract."""
    out = {}
    for name in ("w13", "w2"):
        q, s = prob[name], prob[f"{name}_scale"]
        E, N, K = q.shape
        bw, bs = convert(q, s, fp8_dtype=fp8_dtype, block_size=128)
        want_s = (E, -(-N // 128), -(-K // 128))
        if bw.dtype != fp8_dtype or tuple(bw.shape) != (E, N, K):
            raise ValueError(
                f"{name}: converted weight {bw.dtype}{list(bw.shape)}, want {fp8_dtype}{[E, N, K]}"
            )
        if bs.dtype != torch.float32 or tuple(bs.shape) != want_s:
            raise ValueError(
                f"{name}: converted scale {bs.dtype}{list(bs.shape)}, want float32{list(want_s)}"
            )
        out[name], out[f"{name}_scale"] = bw, bs
    return out


def block_fp8_emulated(
    prob: dict,
    conv: dict,
    fp8_dtype=torch.float8_e4m3fnuz,
    swiglu: dict | None = None,
    scale_div: bool = False,
) -> torch.Tensor:
    """CPU emulation of vLLM's Triton block-FP8 fused MoE on the converted weights.

    ``swiglu`` ({alpha, beta, limit}): the activation's parameters; default: the
    problem's (the MiniMax-M3 reference values)."""
    p = dict(prob["params"], **(swiglu or {}))
    amax = FNUZ_DYN_MAX if fp8_dtype == torch.float8_e4m3fnuz else FN_DYN_MAX
    xq = group_quant_act(prob["hidden"], fp8_dtype, amax, scale_div=scale_div)

    def gemm1(e, r):
        w = dequant_block(conv["w13"][e], conv["w13_scale"][e])
        return (xq[r] @ w.T).to(torch.float32).to(torch.bfloat16)

    def act(g1):
        a = swiglu_oai(g1, p["alpha"], p["beta"], p["limit"]).to(torch.bfloat16)
        return group_quant_act(a, fp8_dtype, amax, scale_div=scale_div)

    def gemm2(e, a, w):
        w2 = dequant_block(conv["w2"][e], conv["w2_scale"][e])
        return ((a @ w2.T).to(torch.float32) * w.unsqueeze(-1)).to(torch.bfloat16)

    return _moe(prob, gemm1, act, gemm2, lambda o: o.to(torch.float32).sum(1).to(torch.bfloat16))


def native_mxfp8_device(prob: dict, device: str = "cuda") -> torch.Tensor:
    """vLLM's native MXFP8 MoE kernel (gfx950 ``dot_scaled``) on the GPU."""
    from vllm.model_executor.layers.fused_moe.experts.mxfp8_native_moe import (
        fused_moe_mxfp8_native,
    )

    p = prob["params"]
    out = fused_moe_mxfp8_native(
        prob["hidden"].to(device),
        prob["w13"].to(device),
        prob["w13_scale"].to(device),
        prob["w2"].to(device),
        prob["w2_scale"].to(device),
        prob["topk_weights"].to(device),
        prob["topk_ids"].to(device),
        alpha=p["alpha"],
        beta=p["beta"],
        limit=p["limit"],
        global_num_experts=prob["w13"].shape[0],
        expert_map=None,
    )
    torch.cuda.synchronize()
    return out.cpu()


def tile_rel_errors(
    q: torch.Tensor, s: torch.Tensor, bq: torch.Tensor, bs: torch.Tensor, block: int = 128
):
    """Relative Frobenius error of each 128x128 tile of the converted weights
    (``bq``, ``bs``) against the MXFP8 weights (``q``, ``s``), one expert:
    returns [ceil(N/128), ceil(K/128)] float64 (0 where the tile is all zero)."""
    ref, got = dequant_mx(q, s), dequant_block(bq, bs, block)
    N, K = ref.shape
    nt, kt = -(-N // block), -(-K // block)
    pad = (0, kt * block - K, 0, nt * block - N)
    d2 = torch.nn.functional.pad((got - ref) ** 2, pad).view(nt, block, kt, block).sum((1, 3))
    r2 = torch.nn.functional.pad(ref**2, pad).view(nt, block, kt, block).sum((1, 3))
    return torch.where(r2 > 0, (d2 / r2.clamp_min(1e-300)).sqrt(), torch.sqrt(d2))


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    a64, r64 = a.to(torch.float64).cpu(), ref.to(torch.float64).cpu()
    return float(torch.linalg.norm(a64 - r64) / torch.linalg.norm(r64))
