"""The spike interventions against their sources' rules, computed by hand or by numpy: Adam-atan2,
OLMo-core's skip-step, Levanter's update-norm clipping, Spike No More's embeddings, and the
simulated low-precision forward."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from models.gpt import GPT, GPTConfig
from models.precision import rounded
from tests.probe_helpers import TINY, batches, one_thread  # noqa: F401  (autouse)
from training.guards import WINDOW, ClipUpdate, Guarded, SkipStep
from training.optim import AdamAtan2
from training.optim_config import OptimConfig


def test_adam_atan2_steps_as_its_formula_by_hand():
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(4, 3))
    start = p.detach().clone()
    opt = AdamAtan2([{"params": [p], "weight_decay": 0.1}], lr=0.01, betas=(0.9, 0.95))
    grads = [torch.randn(4, 3) for _ in range(3)]
    theta, m, v = start.numpy().astype(np.float64), 0.0, 0.0
    for t, g in enumerate(grads, start=1):
        p.grad = g
        opt.step()
        g = g.numpy().astype(np.float64)
        m, v = 0.9 * m + 0.1 * g, 0.95 * v + 0.05 * g * g
        theta = theta * (1 - 0.01 * 0.1)
        theta -= 0.01 * (4 / math.pi) * np.arctan2(m / (1 - 0.9**t), np.sqrt(v / (1 - 0.95**t)))
    np.testing.assert_allclose(p.detach().numpy(), theta, rtol=1e-5, atol=1e-7)
    # the first step is Adam's sign step: (4 / pi) atan2(g, |g|) = sign(g)
    q = torch.nn.Parameter(torch.zeros(5))
    first = AdamAtan2([q], lr=1.0)
    q.grad = torch.tensor([3.0, -1e-12, 2.0, -7.0, 1e6])
    first.step()
    torch.testing.assert_close(q.detach(), -torch.sign(q.grad))


def test_skip_step_follows_olmo_cores_rule():
    """z = |x - mean| / std (n - 1) over the previous values, scored from the 64th value held
    (max(20, 128 // 2)); above 6 the step is skipped; every value joins the history."""
    g = np.random.default_rng(0)
    guard, seen = SkipStep(), []
    losses = list(2.0 + 0.01 * g.standard_normal(70)) + [2.5, 2.0]
    decisions = []
    for loss in losses:
        decisions.append(guard.skip(loss, 1.0 + len(seen) * 1e-3))
        seen.append(loss)
    assert not any(decisions[:70]) and decisions[70] and not decisions[71]
    history = np.array(losses[:70])
    assert abs(2.5 - history.mean()) / history.std(ddof=1) > 6  # the rule by numpy
    assert guard.count == 1 and len(guard.history["loss"]) == 72


def test_clip_update_follows_levanters_rule():
    guard = ClipUpdate()
    norms = [1.0 + 0.1 * (i % 5) for i in range(WINDOW // 2)]
    assert all(guard.factor(n) == 1.0 for n in norms)  # fewer than 64 held: never clipped
    limit = np.mean(norms) + 3 * np.std(norms)  # population std over the values held
    assert guard.factor(10.0) == pytest.approx(limit / 10.0)
    assert guard.count == 1 and guard.history[-1] == 10.0  # the unclipped norm is remembered


def test_clip_update_measures_the_update_before_the_learning_rate_as_levanter():
    """SGD with a constant gradient of norm 1 under a falling learning rate, then one 2x
    gradient: before the lr (Levanter's place in the optax chain) every update norm is 1 and the
    spike is clipped to mean + 3 x max(std, 1e-6) = 1 + 3e-6; the weights' change (lr included)
    would carry the schedule into the history, whose spread lets the 2x spike through."""
    p = torch.nn.Parameter(torch.zeros(4))
    opt = Guarded(torch.optim.SGD([p], lr=0.1), ["clip_update"])
    lrs = np.linspace(0.1, 0.02, WINDOW // 2 + 1)
    for i, lr in enumerate(lrs):
        for group in opt.param_groups:
            group["lr"] = float(lr)
        before = p.detach().clone()
        p.grad = torch.full((4,), 0.5) * (2.0 if i == len(lrs) - 1 else 1.0)  # norm 1, then 2
        opt.step()
    moved = float((p.detach() - before).norm())
    assert opt.counts()["clipped_updates"] == 1
    assert moved == pytest.approx(lrs[-1] * (1 + 3e-6), rel=1e-5)  # the clipped update, x lr
    after_lr = [lr * 1.0 for lr in lrs[:-1]]  # what the weights' change would have held
    assert 2 * lrs[-1] < np.mean(after_lr) + 3 * np.std(after_lr)  # ... and the spike passes


def test_skip_step_scores_the_gradient_norm_before_lightnings_clipping(tmp_path, monkeypatch):
    """OLMo-core scores the gradient norm before clipping: under trainer.gradient_clip_val=1e-3
    the norms skip_step sees are the raw ones (far above 1e-3), and equal to what the gradients
    held when Lightning called on_before_optimizer_step."""
    from hydra import compose, initialize_config_dir

    import train
    from tests.conftest import ROOT, TINY_RUN
    from training import guards

    seen: list[float] = []
    original = guards.SkipStep.skip

    def spy(self, loss, grad_norm):
        seen.append(grad_norm)
        return original(self, loss, grad_norm)

    monkeypatch.setattr(guards.SkipStep, "skip", spy)
    over = [*TINY_RUN, "trainer.max_steps=4", "trainer.gradient_clip_val=0.001", "logger=csv",
            "optim.guards=[skip_step]", f"run_dir={tmp_path}"]  # fmt: skip
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        summary = train.run(compose("config", overrides=over))
    assert summary["status"] == "completed" and len(seen) == 4
    assert min(seen) > 0.01  # pre-clip: a clipped norm would read 0.001


def test_guarded_optimizer_skips_and_clips_real_steps():
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(8))
    opt = Guarded(torch.optim.SGD([p], lr=0.1), ["skip_step", "clip_update"])
    for step in range(80):
        before = p.detach().clone()
        grad = torch.ones(8) * (50.0 if step == 75 else 1.0 + 0.01 * (step % 3))

        def closure(grad=grad, step=step):
            p.grad = grad.clone()
            return torch.tensor(3.0 + 0.01 * (step % 2))

        opt.step(closure)
        moved = float((p.detach() - before).norm())
        if step == 75:  # a 50x gradient: skipped, the weights stay
            assert moved == 0.0
        else:
            assert moved > 0
    assert opt.counts() == {"skipped_steps": 1, "clipped_updates": 0}
    restored = Guarded(torch.optim.SGD([p], lr=0.1), ["skip_step", "clip_update"])
    restored.load_state_dict(copy.deepcopy(opt.state_dict()))
    assert restored.counts() == opt.counts()
    assert list(restored.guards["skip_step"].history["grad"]) == list(
        opt.guards["skip_step"].history["grad"]
    )


def test_guards_are_checked_by_name():
    assert OptimConfig(guards=["skip_step"]).read()["guards"] == ["skip_step"]
    assert "guards" not in OptimConfig().read()  # a run without guards records none
    with pytest.raises(ValueError, match="unknown optim.guards"):
        OptimConfig(guards=["skip"])


def test_spike_no_more_embeddings_by_hand():
    torch.manual_seed(0)
    plain = GPT(GPTConfig(**TINY))
    x = batches(1)[0][0]
    scaled = GPT(GPTConfig(**TINY, emb_scale=True, emb_norm=True))
    scaled.load_state_dict(plain.state_dict() | scaled.emb_norm.state_dict(prefix="emb_norm."))
    captured = []
    scaled.blocks[0].register_forward_pre_hook(lambda m, args: captured.append(args[0]))
    scaled(x)
    e = plain.tok_emb(x) * math.sqrt(TINY["n_embd"]) + plain.pos_emb(torch.arange(x.shape[1]))
    expected = torch.nn.functional.layer_norm(e, (TINY["n_embd"],), eps=1e-5)
    torch.testing.assert_close(captured[0], expected, rtol=1e-5, atol=1e-5)
    assert set(plain.state_dict()) == set(GPT(GPTConfig(**TINY)).state_dict())  # off: as before


def test_the_embedding_gain_is_dyt_and_derfs_learnable_sqrt_d():
    """model.emb_gain: (token + position embeddings) x g, g learnable from sqrt(n_embd), as
    DyT's LLaMA code and Derf's nanoGPT patch; refused beside the fixed emb_scale."""
    torch.manual_seed(0)
    plain = GPT(GPTConfig(**TINY))
    x = batches(1)[0][0]
    gained = GPT(GPTConfig(**TINY, emb_gain=True))
    missing = gained.load_state_dict(plain.state_dict(), strict=False).missing_keys
    assert missing == ["emb_gain"] and gained.emb_gain.item() == math.sqrt(TINY["n_embd"])
    captured = []
    gained.blocks[0].register_forward_pre_hook(lambda m, args: captured.append(args[0]))
    _, loss = gained(x, x)
    e = plain.tok_emb(x) + plain.pos_emb(torch.arange(x.shape[1]))
    torch.testing.assert_close(captured[0], e * math.sqrt(TINY["n_embd"]))
    loss.backward()
    assert gained.emb_gain.grad is not None and gained.emb_gain.grad.abs() > 0
    with pytest.raises(ValueError, match="set one of them false"):
        GPTConfig(**TINY, emb_gain=True, emb_scale=True)


def test_simulated_precision_rounds_forward_and_passes_gradients_straight():
    x = torch.tensor([1.0 + 2**-12, 70000.0, -3.0], requires_grad=True)
    y = rounded(x, torch.float16)
    assert y[0] == 1.0 and math.isinf(y[1]) and y[2] == -3.0  # 2^-12: below fp16's 10 bits
    y[[0, 2]].sum().backward()
    torch.testing.assert_close(x.grad, torch.tensor([1.0, 0.0, 1.0]))
    torch.manual_seed(0)
    full = GPT(GPTConfig(**TINY))
    bf16 = GPT(GPTConfig(**TINY, sim_dtype="bf16"))
    bf16.load_state_dict(full.state_dict())
    xb = batches(1)[0][0]
    a, b = full(xb)[0], bf16(xb)[0]
    assert not torch.equal(a, b) and torch.allclose(a, b, atol=0.05)
    fp16 = GPT(GPTConfig(**TINY, sim_dtype="fp16"))
    fp16.load_state_dict(full.state_dict())
    with torch.no_grad():  # a residual stream past fp16's range overflows there, not in fp32
        for m in (full, fp16):
            m.tok_emb.weight.mul_(1e7)
    assert torch.isfinite(full(xb)[0]).all() and not torch.isfinite(fp16(xb)[0]).all()
    with pytest.raises(ValueError, match="model.sim_dtype='fp4'"):
        GPTConfig(**TINY, sim_dtype="fp4")


def test_every_intervention_runs_from_the_command_line(tmp_path, tiny_run, compose_cfg):
    import json

    import train
    from runs.summary import problems

    over = [
        *tiny_run,
        "optim=adam_atan2",
        "optim.guards=[skip_step,clip_update]",
        "model.emb_scale=true",
        "model.emb_norm=true",
        "model.sim_dtype=bf16",
        f"run_dir={tmp_path}",
    ]
    summary = train.run(compose_cfg(over))
    assert summary["status"] == "completed"
    assert summary["skipped_steps"] == summary["clipped_updates"] == 0  # too few steps to score
    assert problems(json.loads((tmp_path / "summary.json").read_text())) == []


def test_a_guards_action_is_logged_at_its_step_and_told_by_the_card(
    tmp_path, tiny_run, compose_cfg, monkeypatch
):
    """skip_step skipping the 3rd and 5th optimizer steps (0-based 2, 4): guard/skipped_steps
    rises at those steps in metrics.csv, and the run's card places both."""
    import train
    from analysis.cards import story
    from analysis.runs import Warnings, load_run
    from training import guards

    calls = {"n": 0}

    def skip(self, loss: float, grad_norm: float) -> bool:
        calls["n"] += 1
        hit = calls["n"] in (3, 5)
        self.count += hit
        return hit

    monkeypatch.setattr(guards.SkipStep, "skip", skip)
    over = [*tiny_run, "trainer.max_steps=6", "optim.guards=[skip_step]", f"run_dir={tmp_path}"]
    summary = train.run(compose_cfg(over))
    assert summary["skipped_steps"] == 2
    run = load_run(tmp_path, Warnings(quiet=True))
    assert run.metrics["guard/skipped_steps"] == [(2, 1.0), (4, 2.0)]
    assert (2, "skip_step skipped 2 step(s) (at 2, 4)") in story(run)
