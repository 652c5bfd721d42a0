"""Soft-capping, c * tanh(x / c) (Gemma 2): the attention logits against x-transformers' Attend
with its logit softclamp at identical q, k and v, the output logits against the formula, the
sdpa path recovered with a cap far above every logit, and the options' checks."""

from __future__ import annotations

import pytest
import torch
from x_transformers.attend import Attend
from x_transformers.x_transformers import softclamp

from models.gpt import GPT
from models.layers import Attention, softcap
from models.vit import ViT
from tests.models.model_helpers import gpt_config, vit_config


def test_softcap_is_the_reference_formula() -> None:
    x = 40 * torch.randn(1000)
    torch.testing.assert_close(softcap(x, 30.0), softclamp(x, 30.0), rtol=0, atol=0)
    assert softcap(x, 30.0).abs().max() < 30.0 and softcap(x, None) is x


@pytest.mark.parametrize("causal", [True, False])
def test_capped_attention_equals_x_transformers_attend(causal: bool) -> None:
    torch.manual_seed(0)
    attn = Attention(32, 4, causal=causal, softcap=5.0).eval()
    q, k, v = (6 * torch.randn(2, 4, 7, 8) for _ in range(3))  # logits up to ~100: capped
    ref, _ = Attend(causal=causal, softclamp_logits=True, logit_softclamp_value=5.0)(q, k, v)
    torch.testing.assert_close(attn.capped_attention(q, k, v), ref)


def test_a_cap_far_above_every_logit_is_plain_attention() -> None:
    torch.manual_seed(0)
    plain = Attention(32, 4, causal=True).eval()
    capped = Attention(32, 4, causal=True, softcap=1e6).eval()
    capped.load_state_dict(plain.state_dict())
    x = torch.randn(2, 9, 32)
    torch.testing.assert_close(capped(x), plain(x), rtol=1e-5, atol=1e-6)


def test_both_caps_in_the_gpt_and_the_vit() -> None:
    torch.manual_seed(0)
    gpt = GPT(gpt_config(attn_softcap=2.0, logit_softcap=3.0))
    assert all(block.attn.softcap == 2.0 for block in gpt.blocks)
    idx = torch.randint(0, 23, (2, 8))
    with torch.no_grad():
        gpt.lm_head.weight.mul_(100)  # raw logits far beyond the cap
    logits, loss = gpt(idx, idx)
    assert logits.abs().max() <= 3.0 and torch.isfinite(loss)  # tanh reaches 1 in fp32
    loss.backward()
    vit = ViT(vit_config(attn_softcap=2.0, logit_softcap=3.0))
    logits, _ = vit(torch.randn(2, 1, 4, 4))
    assert logits.abs().max() <= 3.0
    with pytest.raises(ValueError, match=r"model\.logit_softcap must be > 0 or null"):
        gpt_config(logit_softcap=0.0)
