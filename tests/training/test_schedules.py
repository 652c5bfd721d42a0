"""The optimizers and lr schedules the task builds, against hand-computed steps and torch's own
optimizers: warmup + cosine / wsd / constant, weight decay and its reach, SGD, Adafactor."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from training.optim_config import OptimConfig
from training.task import TrainTask

pytestmark = pytest.mark.usefixtures("one_thread")


def lrs_over(optim: OptimConfig, total: int, steps: int) -> list[float]:
    task = TrainTask(nn.Linear(2, 2), optim, total_steps=total)
    conf = task.configure_optimizers()
    opt, sched = conf["optimizer"], conf["lr_scheduler"]["scheduler"]
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def test_warmup_then_cosine_matches_hand_computed_values():
    lrs = lrs_over(OptimConfig(lr=1e-3, warmup_steps=10, min_lr_ratio=0.1), total=110, steps=110)
    # warmup (s+1)/10; then 0.1 + 0.9 * (1 + cos(pi * (s-10)/100)) / 2
    expected = {
        0: 1e-4,
        4: 5e-4,
        9: 1e-3,
        10: 1e-3,
        35: 8.6819805e-4,
        60: 5.5e-4,
        109: 1.0022205e-4,
    }
    for step, lr in expected.items():
        assert lrs[step] == pytest.approx(lr, rel=1e-6), step


def test_wsd_holds_the_peak_then_decays_linearly_over_the_last_fifth():
    lrs = lrs_over(
        OptimConfig(lr=1e-3, warmup_steps=10, schedule="wsd", min_lr_ratio=0.1),
        total=110,
        steps=110,
    )
    # warmup (s+1)/10; progress p = (s-10)/100; 1 up to p = 0.8, then 1 - 0.9 * (p - 0.8) / 0.2
    expected = {0: 1e-4, 9: 1e-3, 10: 1e-3, 60: 1e-3, 90: 1e-3, 95: 7.75e-4, 100: 5.5e-4}
    expected[109] = 1e-3 * (1 - 0.9 * 0.19 / 0.2)  # 1.45e-4
    for step, lr in expected.items():
        assert lrs[step] == pytest.approx(lr, rel=1e-6), step


def test_constant_schedule_and_no_warmup():
    lrs = lrs_over(OptimConfig(lr=3e-3, warmup_steps=4, schedule="constant"), total=20, steps=20)
    assert lrs[:4] == pytest.approx([7.5e-4, 1.5e-3, 2.25e-3, 3e-3])
    assert lrs[4:] == pytest.approx([3e-3] * 16)
    assert lrs_over(OptimConfig(lr=2e-3, warmup_steps=0), total=10, steps=1) == [2e-3]


def test_weight_decay_reaches_only_matrices_and_embeddings():
    model = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 4), nn.LayerNorm(4))
    task = TrainTask(model, OptimConfig(lr=1.0, weight_decay=0.1, warmup_steps=0), 10)
    opt = task.configure_optimizers()["optimizer"]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()  # zero gradient: AdamW moves only by decoupled decay, p *= 1 - lr * wd
    for name, p in model.named_parameters():
        factor = 0.9 if p.ndim >= 2 else 1.0
        assert torch.allclose(p, before[name] * factor), name


@pytest.mark.parametrize("independent", [False, True])
def test_independent_weight_decay_does_not_scale_with_the_lr(independent):
    """Wortsman et al.'s independent decay: p *= 1 - wd x schedule, whatever the peak lr;
    torch's AdamW: p *= 1 - lr x wd (zero gradients: decay is the only move)."""
    model = nn.Linear(4, 4)
    cfg = OptimConfig(lr=0.01, weight_decay=0.1, warmup_steps=2, independent_wd=independent)
    task = TrainTask(model, cfg, 10)
    optimizers = task.configure_optimizers()
    opt, sched = optimizers["optimizer"], optimizers["lr_scheduler"]["scheduler"]
    weight = model.weight.detach().clone()
    for step_multiplier in (0.5, 1.0):  # warmup: lr x 1/2, then lr x 1
        model.weight.grad = torch.zeros_like(model.weight)
        model.bias.grad = torch.zeros_like(model.bias)
        opt.step()
        sched.step()
        weight *= 1 - (0.1 if independent else 0.01 * 0.1) * step_multiplier
    torch.testing.assert_close(model.weight.detach(), weight)


def test_sgd_steps_as_momentum_sgd_by_hand():
    torch.manual_seed(0)
    model = nn.Linear(3, 2, bias=False)
    cfg = OptimConfig(name="sgd", lr=0.1, momentum=0.9, weight_decay=0.01, warmup_steps=0)
    opt = TrainTask(model, cfg, 10).configure_optimizers()["optimizer"]
    w, buf = model.weight.detach().clone(), None
    for grad in (torch.ones(2, 3), torch.full((2, 3), -2.0)):
        model.weight.grad = grad.clone()
        opt.step()
        g = grad + 0.01 * w  # torch's SGD decay: an L2 term in the gradient
        buf = g if buf is None else 0.9 * buf + g
        w = w - 0.1 * buf
    torch.testing.assert_close(model.weight.detach(), w)


def test_adafactor_is_torchs_with_the_tasks_groups_and_schedule():
    torch.manual_seed(0)
    ours, ref = nn.Linear(4, 3), nn.Linear(4, 3)
    ref.load_state_dict(ours.state_dict())
    cfg = OptimConfig(name="adafactor", lr=0.01, weight_decay=0.1, warmup_steps=0)
    opt = TrainTask(ours, cfg, 10).configure_optimizers()["optimizer"]
    groups = [
        {"params": [ref.weight], "weight_decay": 0.1},
        {"params": [ref.bias], "weight_decay": 0.0},
    ]
    ref_opt = torch.optim.Adafactor(groups, lr=0.01)
    for _ in range(2):
        for model, o in ((ours, opt), (ref, ref_opt)):
            model.zero_grad()
            model(torch.ones(2, 4)).square().sum().backward()
            o.step()
    torch.testing.assert_close(ours.weight, ref.weight)
    torch.testing.assert_close(ours.bias, ref.bias)
