"""Rotary positions (RoFormer, Su et al. 2021) against the complex-number formula, the GPT and
the ViT without a position table, and nGPT as NVIDIA's official code builds it: untied, rotary
positions, no table."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from models.gpt import GPT, GPTConfig
from models.layers import Attention, rotate
from models.vit import ViT, ViTConfig


def test_rotate_is_the_complex_rotation_of_each_feature_pair() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 8, dtype=torch.float64)  # (B, nh, T, hs)
    theta = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)  # (hs/2,)
    m = torch.arange(7, dtype=torch.float64)[:, None]
    # (x_2i + i x_2i+1) * e^(i m theta_i)
    z = torch.view_as_complex(x.reshape(2, 3, 7, 4, 2).contiguous()) * torch.polar(
        torch.ones(7, 4, dtype=torch.float64), m * theta
    )
    assert torch.allclose(rotate(x), torch.view_as_real(z).reshape(2, 3, 7, 8), atol=1e-12)


def test_rotated_dot_products_depend_on_the_offset_only() -> None:
    torch.manual_seed(1)
    q, k = torch.randn(8), torch.randn(8)
    seq = lambda v: v.expand(1, 1, 12, 8)  # noqa: E731 - the same vector at every position
    rq, rk = rotate(seq(q))[0, 0], rotate(seq(k))[0, 0]
    assert torch.allclose(rq[5] @ rk[2], rq[9] @ rk[6], atol=1e-5)  # offset 3 both
    assert not torch.allclose(rq[5] @ rk[2], rq[5] @ rk[4], atol=1e-3)


def test_attention_with_rope_rotates_q_and_k_by_hand() -> None:
    torch.manual_seed(2)
    attn = Attention(16, 2, causal=True, rope=True).eval()
    x = torch.randn(2, 5, 16)
    q, k, v = (F.linear(x, m.weight, m.bias) for m in (attn.q_proj, attn.k_proj, attn.v_proj))
    q, k, v = (t.view(2, 5, 2, 8).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(rotate(q), rotate(k), v, is_causal=True)
    assert torch.allclose(attn(x), attn.out_proj(y.transpose(1, 2).reshape(2, 5, 16)), atol=1e-6)


def test_rope_models_have_no_position_table() -> None:
    base = {"n_layer": 2, "n_head": 2, "n_embd": 16}
    learned = GPT(GPTConfig(**base, vocab_size=11, block_size=8))
    rope = GPT(GPTConfig(**base, vocab_size=11, block_size=8, pos="rope"))
    assert rope.pos_emb is None and learned.num_params() - rope.num_params() == 8 * 16
    logits, _ = rope(torch.randint(0, 11, (2, 8)))
    assert logits.shape == (2, 8, 11)
    vit = ViT(ViTConfig(**base, pos="rope"))
    assert vit.pos_emb is None and vit(torch.randn(2, 1, 8, 8))[0].shape == (2, 10)
    with pytest.raises(ValueError, match="n_embd / n_head = 3 is odd"):
        GPTConfig(n_head=2, n_embd=6, pos="rope")
    with pytest.raises(ValueError, match="model.pos='abs': choose one of learned, rope"):
        GPTConfig(pos="abs")
    with pytest.raises(ValueError, match="the ViT has no token embedding"):
        ViTConfig(tie_weights=True)


@pytest.mark.parametrize("model", ["gpt", "vit"])
def test_ngpt_is_untied_with_rotary_positions_by_default(compose_cfg, model: str) -> None:
    cfg = compose_cfg([f"model={model}", "placement=ngpt"])
    assert cfg.model.pos == "rope" and cfg.model.tie_weights is False
    if model == "gpt":
        fields = {k: v for k, v in cfg.model.items() if k in GPTConfig.__dataclass_fields__}
        gpt = GPT(GPTConfig(**{**fields, "vocab_size": 11}, placement="ngpt"))
        assert gpt.pos_emb is None and gpt.lm_head.weight is not gpt.tok_emb.weight
