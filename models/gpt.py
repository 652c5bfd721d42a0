"""A small causal GPT whose norm placement and norm type come from the config."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from models.config import GPTConfig  # noqa: F401 (the public API: models.gpt.GPTConfig)
from models.flops import training_flops_per_token
from models.layers import softcap
from models.stack import Stack


class GPT(Stack):
    """Token (+ position) embeddings -> n_layer Blocks -> (final norm) -> LM head; with
    ``pos=rope`` the positions rotate q and k inside each attention instead."""

    kind = "decoder"

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        # rope: positions rotate q and k in every attention, no table
        self.pos_emb = nn.Embedding(cfg.block_size, cfg.n_embd) if cfg.pos == "learned" else None
        self.drop = nn.Dropout(cfg.dropout)
        # Takase et al. 2023: embeddings times sqrt(d) ("Scaled Embed"), a norm on them ("Embed LN")
        self.emb_scale = math.sqrt(cfg.n_embd) if cfg.emb_scale else None
        self.emb_norm = cfg.norm.build(cfg.n_embd) if cfg.emb_norm else nn.Identity()
        # DyT's and Derf's language models: (token + position embeddings) x g, g learnable
        gain = torch.full((1,), math.sqrt(cfg.n_embd))
        self.emb_gain = nn.Parameter(gain) if cfg.emb_gain else None
        self.build_stack(cfg, n_out=cfg.vocab_size)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.init_stack(cfg)
        if cfg.tie_weights:
            self.lm_head.weight = self.tok_emb.weight
        self.normalize_weights()

    @classmethod
    def from_hf(cls, path_or_id: str) -> GPT:
        """A Hugging Face GPT-2 checkpoint (a save_pretrained directory, or a hub id already in
        the local Hugging Face cache) as normlab's Pre-LN GPT (models/pretrained.py)."""
        from models import pretrained

        directory = pretrained.checkpoint_dir(path_or_id)
        config, tensors = pretrained.read_hf_checkpoint(directory)
        model = cls(GPTConfig(**pretrained.gpt2_fields(config)))
        pretrained.load_gpt2_weights(model, tensors, str(directory))
        return model

    def flops_per_unit(self) -> float:
        """Training FLOPs per token: 6N + 12 L T d (PaLM, Chowdhery et al. 2022, appendix B);
        N leaves out the position table, a lookup, and counts a tied head once."""
        c = self.cfg
        n = self.num_params() - (self.pos_emb.weight.numel() if self.pos_emb is not None else 0)
        return training_flops_per_token(n, c.n_layer, c.block_size, c.n_embd)

    def embedding_weights(self) -> list[tuple[torch.Tensor, int]]:
        pairs = [(self.tok_emb.weight, 1)]
        pairs += [(self.pos_emb.weight, 1)] if self.pos_emb is not None else []
        return pairs if self.cfg.tie_weights else [*pairs, (self.lm_head.weight, 1)]

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, T = idx.shape
        if self.cfg.block_size < T:
            raise ValueError(f"sequence length {T} exceeds block_size={self.cfg.block_size}")
        x = self.tok_emb(idx)  # (B, T, C)
        if self.emb_scale is not None:
            x = x * self.emb_scale
        if self.pos_emb is not None:
            x = x + self.pos_emb(torch.arange(T, device=idx.device))
        if self.emb_gain is not None:
            x = x * self.emb_gain
        x = self.drop(self.emb_norm(x))
        x = self.run_blocks(x)
        logits = self.logit_scale(self.lm_head(self.final_norm(x)))  # (B, T, V)
        logits = softcap(logits, self.cfg.logit_softcap)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))
        return logits, loss
