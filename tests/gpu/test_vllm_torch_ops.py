"""The GPU harness's torch stand-ins for vLLM's compiled MoE ops, against their contracts."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vllm_torch_ops as ops  # noqa: E402


def test_moe_align_block_size_matches_the_documented_example():
    # vllm/model_executor/layers/fused_moe/moe_align_block_size.py docstring
    topk_ids = torch.tensor([[2, 3, 4], [1, 2, 4], [1, 3, 4], [1, 2, 3]], dtype=torch.int32)
    sorted_ids = torch.empty(12 + 5 * 3, dtype=torch.int32)
    expert_ids = torch.empty(-(-sorted_ids.numel() // 4), dtype=torch.int32)
    post = torch.empty(1, dtype=torch.int32)
    ops.moe_align_block_size(topk_ids, 5, 4, sorted_ids, expert_ids, post)
    assert int(post) == 16
    assert sorted_ids[:16].tolist() == [3, 6, 9, 12, 0, 4, 10, 12, 1, 7, 11, 12, 2, 5, 8, 12]
    assert expert_ids[:4].tolist() == [1, 2, 3, 4]
    assert set(sorted_ids[16:].tolist()) == {12}  # the rest is padding


def test_silu_and_mul_with_clamp_is_swiglu_oai():
    x = torch.tensor([[10.0, -1.0, 20.0, -9.0]], dtype=torch.bfloat16)
    out = torch.empty(1, 2, dtype=torch.bfloat16)
    ops.silu_and_mul_with_clamp(out, x, 7.0, 1.702, 1.0)
    gate, up = torch.tensor([7.0, -1.0]), torch.tensor([7.0, -7.0])
    assert torch.equal(
        out, (gate * torch.sigmoid(1.702 * gate) * (up + 1.0)).to(torch.bfloat16)[None]
    )


def test_moe_sum_and_group_quant():
    inp = torch.arange(24, dtype=torch.float32).view(2, 3, 4).to(torch.bfloat16)
    out = torch.empty(2, 4, dtype=torch.bfloat16)
    ops.moe_sum(inp, out)
    assert torch.equal(out, inp.float().sum(1).to(torch.bfloat16))
    x = torch.linspace(-3, 5, 256).view(1, 256)
    q = torch.empty(1, 256, dtype=torch.float8_e4m3fn)
    s = torch.empty(1, 2)
    ops.per_token_group_fp8_quant_torch(x, q, s, 128, 1e-10, -448.0, 448.0, False, False, False)
    assert torch.equal(s, torch.tensor([[3.0, 5.0]]) / 448.0)
    # half an E4M3 step at the top: 16 * 5/448
    assert float((q.float() * s.repeat_interleave(128, 1) - x).abs().max()) < 0.2


def test_install_never_shadows_and_names_what_it_added():
    added = ops.install(triton_quant=False)
    assert "_C.silu_and_mul_with_clamp" in added or not ops._missing(
        "_C", "silu_and_mul_with_clamp"
    )
    assert ops.install(triton_quant=False) == []  # second call: nothing missing any more
