"""A plain Pre-LN GPT in the style of the short single-file training scripts: the benchmark's
yardstick for "as fast as plain PyTorch". One fused q/k/v Linear, SDPA attention, nn.LayerNorm,
tied embeddings, no options. It computes the same function as normlab's Pre-LN LayerNorm GPT, so
normlab's weights load into it (copy_gpt_to_plain) and the logits can be compared.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.gpt import GPT


class PlainBlock(nn.Module):
    def __init__(self, d: int, n_head: int, approximate: str) -> None:
        super().__init__()
        self.n_head, self.approximate = n_head, approximate
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        qkv = self.qkv(self.ln_1(x)).view(B, T, 3, self.n_head, C // self.n_head)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # (B, nh, T, hs) each
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln_2(x)), approximate=self.approximate))


class PlainGPT(nn.Module):
    def __init__(
        self, vocab: int, context: int, n_layer: int, n_head: int, d: int, approximate: str
    ) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(PlainBlock(d, n_head, approximate) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def plain_like(ours: GPT) -> PlainGPT:
    """A PlainGPT of normlab GPT `ours`'s shape and activation, holding its weights."""
    c = ours.cfg
    approximate = {"gelu": "none", "gelu_tanh": "tanh"}[c.activation]
    plain = PlainGPT(c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_embd, approximate)
    with torch.no_grad():
        plain.wte.weight.copy_(ours.tok_emb.weight)
        plain.wpe.weight.copy_(ours.pos_emb.weight)
        plain.ln_f.load_state_dict(ours.final_norm.state_dict())
        for b, p in zip(ours.blocks, plain.blocks, strict=True):
            a = b.attn
            p.ln_1.load_state_dict(b.attn_pre.state_dict())
            p.ln_2.load_state_dict(b.mlp_pre.state_dict())
            p.qkv.weight.copy_(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]))
            p.qkv.bias.copy_(torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]))
            for dst, src in ((p.proj, a.out_proj), (p.fc, b.mlp.fc1), (p.out, b.mlp.fc2)):
                dst.load_state_dict(src.state_dict())
    return plain


def describe(
    model: nn.Module,
    blocks: nn.ModuleList,
    n_head: int,
    wte: nn.Embedding,
    wpe: nn.Embedding,
    head: nn.Module,
    mlp_hidden: int,
    gelu: str,
    attention: str,
) -> dict:
    """The fields the benchmark compares between GPT implementations."""
    return dict(
        n_layer=len(blocks),
        n_head=n_head,
        n_embd=wte.embedding_dim,
        block_size=wpe.num_embeddings,
        vocab_size=wte.num_embeddings,
        mlp_hidden=mlp_hidden,
        tied=head.weight is wte.weight,
        gelu=gelu,
        attention=attention,
        params=sum(p.numel() for p in model.parameters()),  # shared tensors once
    )


def describe_plain(m: PlainGPT) -> dict:
    b = m.blocks[0]
    gelu = "exact" if b.approximate == "none" else b.approximate
    return describe(m, m.blocks, b.n_head, m.wte, m.wpe, m.head, b.fc.out_features, gelu, "sdpa")
