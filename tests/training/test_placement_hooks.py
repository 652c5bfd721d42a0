"""The harness's two placement hooks: Admin's profile at the start of a fresh run only, nGPT's
weights back on the sphere after every step; both survive a resume bit for bit."""

from __future__ import annotations

import pytest
import torch

import train
from tests.helpers import interrupted_and_uninterrupted

pytestmark = pytest.mark.usefixtures("one_thread")
STEADY = ["optim.warmup_steps=0", "optim.schedule=constant", "model.n_layer=2"]


def state(run_dir) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "last.ckpt", weights_only=True)["state_dict"]


@pytest.mark.parametrize("placement", ["admin", "ngpt"])
def test_an_interrupted_run_resumes_to_the_uninterrupted_one(
    placement, tmp_path, tiny_run, compose_cfg, monkeypatch
):
    over = [*tiny_run, f"placement={placement}", "model.n_layer=2", "trainer.max_steps=6"]
    # equal losses: a second profile at the resume would change them
    interrupted_and_uninterrupted(compose_cfg, over, tmp_path, monkeypatch)
    for key, value in state(tmp_path / "ref").items():
        assert torch.equal(value, state(tmp_path / "run")[key]), key


def test_admin_omegas_are_profiled_then_trained(tmp_path, tiny_run, compose_cfg):
    train.run(compose_cfg([*tiny_run, *STEADY, "placement=admin", f"run_dir={tmp_path}"]))
    omegas = {k: v for k, v in state(tmp_path).items() if k.endswith(".omega")}
    assert len(omegas) == 4  # two sub-layers x two blocks
    # Profiled, then trained: the first skip starts at 1 (plain Post-LN), the later ones at the
    # branch variances summed before them, so the last weighs its input most.
    first = omegas["model.blocks.0.attn_residual.omega"]
    last = omegas["model.blocks.1.mlp_residual.omega"]
    assert (first - 1).abs().max() < 0.05 and last.mean() > first.mean() + 0.2
    assert first.std() > 0 or last.std() > 0  # trained: no longer one value per vector


def test_ngpt_trains_on_the_sphere_without_biases_decay_or_warmup(tmp_path, tiny_run, compose_cfg):
    tiny = [o for o in tiny_run if not o.startswith("optim.warmup_steps")]  # the placement's
    cfg = compose_cfg([*tiny, "placement=ngpt", f"run_dir={tmp_path}"])
    assert (cfg.model.bias, cfg.optim.weight_decay, cfg.optim.warmup_steps) == (False, 0.0, 0)
    summary = train.run(cfg)
    assert summary["status"] == "completed"
    weights = state(tmp_path)
    assert not any(k.endswith(".bias") for k in weights if ".blocks." in k)
    rows = weights["model.blocks.0.attn.q_proj.weight"].norm(dim=1)
    cols = weights["model.blocks.0.mlp.fc2.weight"].norm(dim=0)
    for norms in (rows, cols, weights["model.tok_emb.weight"].norm(dim=1)):
        torch.testing.assert_close(norms, torch.ones_like(norms))


def test_attention_probes_read_the_logits_ngpt_uses():
    """nGPT's logits are q.k * sqrt(d_head), not / sqrt(d_head): the probes take the
    attention's own scale."""
    from models.attention_scores import attention_scores
    from models.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    cfg = dict(vocab_size=11, block_size=6, n_layer=1, n_head=2, n_embd=8, bias=False)
    for placement, scale in (("ngpt", 2.0), ("pre", 0.5)):  # d_head = 4
        attn = GPT(GPTConfig(**cfg, placement=placement)).blocks[0].attn
        x = torch.randn(2, 6, 8)
        q, k = attn.qk(x)
        expected = (q @ k.transpose(-2, -1) * scale).masked_fill(
            torch.ones(6, 6).triu(1).bool(), float("-inf")
        )
        torch.testing.assert_close(attention_scores(attn, x), expected)
