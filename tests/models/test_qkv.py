"""Attention's q, k, v weights live in one tensor (models/layers.py, Attention.pack_qkv): the
forward reads the (3C, C) weight as a view instead of a per-forward torch.cat, while q_proj,
k_proj and v_proj stay separate nn.Linears with their own leaf Parameters and gradients."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from models.gpt import GPT, GPTConfig
from models.layers import Attention, adjacent, stacked

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
def test_qkv_parameters_share_one_tensor_and_stay_leaves(bias):
    attn = Attention(16, 2, causal=True, bias=bias)
    weights = [m.weight for m in projections(attn)]
    assert adjacent(weights)
    assert all(isinstance(w, nn.Parameter) and w.is_leaf and w.shape == (16, 16) for w in weights)
    base = weights[0].untyped_storage().data_ptr()
    assert [w.storage_offset() for w in weights] == [0, 256, 512]
    assert all(w.untyped_storage().data_ptr() == base for w in weights)
    if bias:
        assert adjacent([m.bias for m in projections(attn)])
    else:
        assert all(m.bias is None for m in projections(attn))
    assert len(list(attn.parameters())) == (8 if bias else 4)  # nothing extra registered


@pytest.mark.parametrize("bias", [True, False])
def test_packed_forward_and_grads_match_separate_projections(bias):
    torch.manual_seed(0)
    attn = Attention(16, 2, causal=True, bias=bias)
    with torch.no_grad():
        for p in attn.parameters():
            p.normal_(0, 0.3)  # nonzero biases, so a mixed-up bias block would show
    ref = copy.deepcopy(attn)  # a deep copy owns separate tensors: qkv() concatenates there
    assert not adjacent([m.weight for m in projections(ref)])
    x = torch.randn(3, 8, 16)
    y = attn(x)
    torch.testing.assert_close(y, reference_attention(ref, x), rtol=1e-5, atol=1e-6)
    g = torch.randn_like(y)
    y.backward(g)
    reference_attention(ref, x).backward(g)
    for (name, p), q in zip(attn.named_parameters(), ref.parameters(), strict=True):
        assert p.grad is not None and p.grad.shape == p.shape, name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_packed_and_concatenated_paths_are_bit_identical():
    """The view holds exactly what torch.cat would copy: same GEMM, same bits, in a whole GPT."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    unpacked = copy.deepcopy(model)
    idx = torch.randint(0, TINY["vocab_size"], (4, 8))
    loss = model(idx, idx)[1]
    loss_ref = unpacked(idx, idx)[1]
    assert torch.equal(loss, loss_ref)
    loss.backward()
    loss_ref.backward()
    for p, q in zip(model.parameters(), unpacked.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)


def test_packing_survives_optimizer_steps_dtype_moves_and_state_dict_loads():
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    attn = model.blocks[0].attn
    idx = torch.randint(0, TINY["vocab_size"], (2, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(2):
        model(idx, idx)[1].backward()
        opt.step()
        opt.zero_grad()
    assert adjacent([m.weight for m in projections(attn)])
    other = GPT(GPTConfig(**TINY))
    other.load_state_dict(model.state_dict())  # copies in place: still packed
    assert adjacent([m.weight for m in projections(other.blocks[0].attn)])
    torch.testing.assert_close(other(idx, idx)[0], model(idx, idx)[0])
    model.double()  # every tensor gets new storage; the Attention packs again
    assert attn.q_proj.weight.dtype == torch.float64
    assert adjacent([m.weight for m in projections(attn)])
    assert adjacent([m.bias for m in projections(attn)])


def test_in_place_init_reaches_one_block_only():
    """DeepNorm's beta multiplies v_proj's weight in place: its rows only, not q's or k's."""
    attn = Attention(16, 2, causal=True)
    before = [m.weight.detach().clone() for m in projections(attn)]
    with torch.no_grad():
        attn.v_proj.weight.mul_(0.5)
    q, k, v = (m.weight for m in projections(attn))
    assert torch.equal(q, before[0]) and torch.equal(k, before[1])
    torch.testing.assert_close(v, 0.5 * before[2])
    w = torch.cat([q, k, v])
    torch.testing.assert_close(stacked([q, k, v]), w)


def test_stacked_concatenates_tensors_that_are_not_adjacent():
    a, b = torch.randn(2, 3), torch.randn(4, 3)
    assert not adjacent([a, b])
    torch.testing.assert_close(stacked([a, b]), torch.cat([a, b]))
    base = torch.randn(6, 3)
    assert not adjacent([base[2:], base[:2]])  # same storage, wrong order
    torch.testing.assert_close(stacked([base[2:], base[:2]]), torch.cat([base[2:], base[:2]]))
    assert adjacent([base[:2], base[2:]])
    assert stacked([base[:2], base[2:]]).data_ptr() == base.data_ptr()  # a view: no copy


def test_weight_norm_projections_fall_back_to_concatenation():
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY, weight_norm=True))
    attn = model.blocks[0].attn
    assert nn.utils.parametrize.is_parametrized(attn.q_proj, "weight")
    x = torch.randn(2, 8, 16)
    torch.testing.assert_close(attn(x), reference_attention(attn, x), rtol=1e-5, atol=1e-6)


def test_the_attention_traces_into_one_graph_under_torch_compile():
    """Storage pointers do not trace: under torch.compile qkv() takes the plain torch.cat, so the
    compiled GPT has no graph break (explain traces with dynamo only, no code generation)."""
    torch._dynamo.reset()
    model = GPT(GPTConfig(**TINY))
    idx = torch.randint(0, TINY["vocab_size"], (2, 8))
    explained = torch._dynamo.explain(model)(idx, idx)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
