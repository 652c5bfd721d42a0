"""Variants as their official code builds them: ReZero's one gate per layer (Bachlechner et al.
2020, rztx.py: one ``resweight`` for both sub-layers), and QK-norm over the full width before
the head split (OLMo 2: q_norm and k_norm over d_model)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from models.gpt import GPT, GPTConfig
from scripts import migrate
from training.attempt import config_changes


def small(**kw) -> GPTConfig:
    return GPTConfig(n_layer=3, n_head=2, n_embd=16, vocab_size=11, block_size=8, **kw)


@pytest.mark.parametrize(("gates", "per_layer"), [("layer", 1), ("sublayer", 2)])
def test_rezero_gate_count(gates: str, per_layer: int) -> None:
    model = GPT(small(placement={"name": "rezero", "gates": gates}))
    found = [n for n, _ in model.named_parameters() if "branch_out" in n]
    assert len(found) == per_layer * 3


def test_rezero_block_is_the_official_formula_with_one_resweight() -> None:
    torch.manual_seed(0)
    model = GPT(small(placement="rezero")).eval()
    block = model.blocks[1]
    with torch.no_grad():
        block.attn_branch_out.weight.fill_(0.3)
    x = torch.randn(2, 5, 16)
    # rztx.py: src = src + resweight * attn(src); src = src + resweight * ff(src)
    h = x + 0.3 * block.attn(x)
    assert torch.allclose(block(x), h + 0.3 * block.mlp(h), atol=1e-6)


def test_a_rezero_record_without_gates_is_migrated_to_one_gate_per_sub_layer() -> None:
    """Records written before placement.gates ran ReZero with one gate per sub-layer: the
    migration writes that into them, so a resume with today's default is refused naming it."""
    old = migrate.migrated_run_config({"placement.name": "rezero"})
    new = {"placement.name": "rezero", "placement.gates": "layer"}
    assert config_changes(old, new) == ["placement.gates: sublayer -> layer"]
    assert config_changes(old, {**new, "placement.gates": "sublayer"}) == []
    assert migrate.migrated_run_config({"placement.name": "pre"}) == {"placement.name": "pre"}


def test_full_width_qk_norm_normalizes_q_and_k_before_the_head_split() -> None:
    torch.manual_seed(0)
    model = GPT(small(qk_norm=True, qk_norm_width="full", norm="rmsnorm")).eval()
    attn = model.blocks[0].attn
    assert attn.q_norm.weight.shape == (16,)  # over d_model, not the head size (8)
    with torch.no_grad():
        attn.q_norm.weight.uniform_(0.5, 1.5)
        attn.k_norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 5, 16)
    q, k, v = (F.linear(x, m.weight, m.bias) for m in (attn.q_proj, attn.k_proj, attn.v_proj))

    def rms(t: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # OLMo 2's RMSNorm over d_model
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + attn.q_norm.eps) * w

    q, k = rms(q, attn.q_norm.weight), rms(k, attn.k_norm.weight)
    heads = [t.view(2, 5, 2, 8).transpose(1, 2) for t in (q, k, v)]
    y = F.scaled_dot_product_attention(*heads, is_causal=True).transpose(1, 2).reshape(2, 5, 16)
    assert torch.allclose(attn(x), attn.out_proj(y), atol=1e-5)
    per_head = GPT(small(qk_norm=True, norm="rmsnorm")).blocks[0].attn
    assert per_head.q_norm.weight.shape == (8,)


def test_qk_norm_width_is_checked() -> None:
    with pytest.raises(ValueError, match="qk_norm_width='wide': choose one of head, full"):
        GPT(small(qk_norm=True, qk_norm_width="wide"))
