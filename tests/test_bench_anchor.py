"""The nanoGPT anchor: nanoGPT's learning-rate rule as its train.py states it, hand-computed; a
wrong --nanogpt dir refused in one line before any run; and (slow) the whole comparison with a
stand-in for nanoGPT's model.py that records what it is fed: the same batches normlab drew."""

from __future__ import annotations

import math

import pytest

from scripts.bench.anchor import Recipe, main, nanogpt_lr


def test_the_learning_rate_follows_nanogpts_rule():
    r = Recipe()  # lr 1e-3, warmup 100, cosine to 1e-4 at 2000
    assert nanogpt_lr(0, r) == pytest.approx(1e-3 / 101)
    assert nanogpt_lr(99, r) == pytest.approx(1e-3 * 100 / 101)
    assert nanogpt_lr(100, r) == pytest.approx(1e-3)
    assert nanogpt_lr(1050, r) == pytest.approx(1e-4 + 0.5 * 9e-4)  # halfway: cos = 0
    assert nanogpt_lr(1525, r) == pytest.approx(1e-4 + 0.5 * (1 + math.cos(0.75 * math.pi)) * 9e-4)
    assert nanogpt_lr(2000, r) == pytest.approx(1e-4)
    assert nanogpt_lr(2500, r) == pytest.approx(1e-4)


def test_a_missing_nanogpt_clone_is_one_line_before_any_run(tmp_path):
    with pytest.raises(SystemExit, match=r"no nanoGPT model.py in .*git clone"):
        main(["--nanogpt", str(tmp_path), "--steps", "2"])


STAND_IN = """
from dataclasses import dataclass
import torch

SEEN = []

@dataclass
class GPTConfig:
    block_size: int
    vocab_size: int
    n_layer: int
    n_head: int
    n_embd: int
    dropout: float
    bias: bool

class GPT(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.table = torch.nn.Embedding(config.vocab_size, config.vocab_size)

    def forward(self, idx, targets):
        if self.training:
            SEEN.append(idx.clone())
        logits = self.table(idx)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        return torch.optim.AdamW(self.parameters(), lr=learning_rate, betas=betas)
"""


@pytest.mark.slow  # 20-40 s: a 4-step normlab run at the recipe's size; fast: the tests above
def test_both_sides_train_on_the_same_batches(tmp_path, monkeypatch):
    from scripts.bench import anchor

    (tmp_path / "model.py").write_text(STAND_IN)
    loaded = {}
    real_load = anchor.load_nanogpt
    monkeypatch.setattr(anchor, "load_nanogpt", lambda d: loaded.setdefault("m", real_load(d)))
    result = main(["--nanogpt", str(tmp_path), "--steps", "4", "--seeds", "3"])
    (row,) = result["runs"]
    assert math.isfinite(row["normlab"]) and math.isfinite(row["nanogpt"])
    seen = loaded["m"].SEEN
    assert len(seen) == 4
    # normlab's data module at seed 3 draws these batches for steps 0-3
    from training.build import build_data
    from training.run_config import typed_config

    cfg = anchor.compose_train_cfg(anchor.normlab_overrides(Recipe(steps=4), 3, tmp_path / "x"))
    dm = build_data(typed_config(cfg))
    dm.setup()
    for step, idx in enumerate(seen):
        assert (idx == dm.train_batch(step)[0]).all()
