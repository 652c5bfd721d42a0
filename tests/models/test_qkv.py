"""Attention's q, k, v projections (models/layers.py): three nn.Linears with their own
Parameters and gradients, run as one matmul over their stacked weights."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from models.gpt import GPT, GPTConfig
from models.layers import Attention

TINY = dict(vocab_size=23, block_size=8, n_layer=2, n_head=2, n_embd=16)


def projections(attn: Attention) -> tuple[nn.Linear, nn.Linear, nn.Linear]:
    return attn.q_proj, attn.k_proj, attn.v_proj


def reference_attention(attn: Attention, x: torch.Tensor) -> torch.Tensor:
    """The same attention from three separate projections (no stacking at all)."""
    B, T, C = x.shape
    q, k, v = (lin(x).view(B, T, attn.n_head, -1).transpose(1, 2) for lin in projections(attn))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=attn.causal)
    return attn.out_proj(y.transpose(1, 2).reshape(B, T, C))


@pytest.mark.parametrize("bias", [True, False])
def test_stacked_forward_and_grads_match_separate_projections(bias):
    torch.manual_seed(0)
    attn = Attention(16, 2, causal=True, bias=bias)
    with torch.no_grad():
        for p in attn.parameters():
            p.normal_(0, 0.3)  # nonzero biases, so a mixed-up bias block would show
    ref = copy.deepcopy(attn)
    x = torch.randn(3, 8, 16)
    y = attn(x)
    torch.testing.assert_close(y, reference_attention(ref, x), rtol=1e-5, atol=1e-6)
    g = torch.randn_like(y)
    y.backward(g)
    reference_attention(ref, x).backward(g)
    for (name, p), q in zip(attn.named_parameters(), ref.parameters(), strict=True):
        assert p.grad is not None and p.grad.shape == p.shape, name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_in_place_init_reaches_one_block_only():
    """DeepNorm's beta multiplies v_proj's weight in place: its rows only, not q's or k's."""
    attn = Attention(16, 2, causal=True)
    before = [m.weight.detach().clone() for m in projections(attn)]
    with torch.no_grad():
        attn.v_proj.weight.mul_(0.5)
    q, k, v = (m.weight for m in projections(attn))
    assert torch.equal(q, before[0]) and torch.equal(k, before[1])
    torch.testing.assert_close(v, 0.5 * before[2])


def test_weight_norm_projections_stack_their_normalized_weights():
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY, weight_norm=True))
    attn = model.blocks[0].attn
    assert nn.utils.parametrize.is_parametrized(attn.q_proj, "weight")
    x = torch.randn(2, 8, 16)
    torch.testing.assert_close(attn(x), reference_attention(attn, x), rtol=1e-5, atol=1e-6)


def test_the_attention_traces_into_one_graph_under_torch_compile():
    """The compiled GPT has no graph break (explain traces with dynamo only, no code
    generation)."""
    torch._dynamo.reset()
    model = GPT(GPTConfig(**TINY))
    idx = torch.randint(0, TINY["vocab_size"], (2, 8))
    explained = torch._dynamo.explain(model)(idx, idx)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
