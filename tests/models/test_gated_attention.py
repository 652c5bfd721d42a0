"""Gated attention (Qiu et al. 2025, "Gated Attention for Large Language Models"): the heads'
output Y times sigmoid(X W_theta) before the output projection, X the attention's input, one
gate per head or per feature, against that equation written out here."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from models.gpt import GPT
from models.layers import Attention
from models.vit import ViT
from tests.models.model_helpers import gpt_config, vit_config


@pytest.mark.parametrize("gate", ["headwise", "elementwise"])
def test_gated_attention_is_the_papers_equation(gate: str) -> None:
    torch.manual_seed(0)
    attn = Attention(32, 4, causal=True, gate=gate).eval()
    x = torch.randn(2, 7, 32)
    q, k, v = attn.qkv(x)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
    g = torch.sigmoid(x @ attn.gate_proj.weight.T)  # (B, T, nh) or (B, T, C)
    if gate == "headwise":
        assert attn.gate_proj.weight.shape == (4, 32)
        y = y * g.transpose(1, 2)[..., None]
    else:
        assert attn.gate_proj.weight.shape == (32, 32)
        y = y * g.view(2, 7, 4, 8).transpose(1, 2)
    expected = attn.out_proj(y.transpose(1, 2).reshape(2, 7, 32))
    torch.testing.assert_close(attn(x), expected)
    # a zero gate weight halves every head's output: out_proj(y / 2) = (W / 2) y + b
    plain = Attention(32, 4, causal=True).eval()
    plain.load_state_dict({k: v for k, v in attn.state_dict().items() if "gate" not in k})
    with torch.no_grad():
        attn.gate_proj.weight.zero_()
        plain.out_proj.weight.mul_(0.5)
    torch.testing.assert_close(attn(x), plain(x))


def test_gated_attention_in_the_gpt_and_the_vit() -> None:
    torch.manual_seed(0)
    gpt = GPT(gpt_config(attn_gate="headwise"))
    assert all(block.attn.gate == "headwise" for block in gpt.blocks)
    idx = torch.randint(0, 23, (2, 8))
    _, loss = gpt(idx, idx)
    loss.backward()
    assert all(b.attn.gate_proj.weight.grad.abs().sum() > 0 for b in gpt.blocks)
    _, loss = ViT(vit_config(attn_gate="elementwise"))(
        torch.randn(2, 1, 4, 4), torch.tensor([1, 2])
    )
    assert torch.isfinite(loss)
    with pytest.raises(ValueError, match=r"model\.attn_gate='both'"):
        gpt_config(attn_gate="both")
