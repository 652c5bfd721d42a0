"""Spikes made to happen (the spike protocol: optim.spike_at / spike_steps / spike_factor, a
learning-rate jump) and ZClip (Kumar et al. 2025, optim.guards=[zclip]): the schedule's factor by
hand, ZClip's rule on a case worked from the authors' definition, its state across a resume, and
a tiny run whose loss the protocol moves more than 6 sigma."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest
import torch

from runs.errors import ConfigError
from tests.conftest import ROOT
from training.guards import Guarded, ZClip
from training.optim_config import OptimConfig, lr_multiplier


def test_the_spike_multiplies_the_schedule_for_its_steps() -> None:
    plain = OptimConfig(warmup_steps=10, schedule="constant")
    spiked = OptimConfig(warmup_steps=10, schedule="constant", spike_at=50, spike_steps=3,
                         spike_factor=20.0)  # fmt: skip
    factors = [lr_multiplier(s, spiked, 100) / lr_multiplier(s, plain, 100) for s in range(100)]
    assert [s for s, f in enumerate(factors) if f != 1.0] == [50, 51, 52]
    assert factors[50] == 20.0
    defaults = OptimConfig(spike_at=5)  # steps and factor left null: 10 steps at x10
    assert [lr_multiplier(s, defaults, 100) / lr_multiplier(s, OptimConfig(), 100)
            for s in (4, 5, 14, 15)] == pytest.approx([1.0, 10.0, 10.0, 1.0])  # fmt: skip


@pytest.mark.parametrize("bad", ["optim.spike_steps=5", "optim.spike_at=-1",
                                 "optim.spike_factor=0", "optim.spike_at=2.5"])  # fmt: skip
def test_a_bad_spike_is_one_line(bad, compose_cfg) -> None:
    from training.run_config import typed_config

    extra = [] if bad.startswith(("optim.spike_at", "optim.spike_steps")) else ["optim.spike_at=5"]
    with pytest.raises(ConfigError, match="optim.spike"):
        typed_config(compose_cfg([bad, *extra]))


def test_zclip_by_hand() -> None:
    """25 warmup norms alternating 1.0 and 1.2 start the EMA at mean 1.1, variance 0.01; a norm
    of 2.0 has z = 0.9 / (0.1 + 1e-6) = 8.99991, is clipped to 1.1 + 2.5^2 x 0.1 / z = 1.169445,
    and the EMA takes that: mean 0.97 x 1.1 + 0.03 x 1.169445 = 1.102083, variance
    0.97 x 0.01 + 0.03 x (1.169445 - 1.102083)^2 = 0.009836."""
    z = ZClip()
    warm = [1.0 if k % 2 == 0 else 1.2 for k in range(24)] + [1.1]
    assert [z.factor(g) for g in warm] == [1.0] * 25 and z.count == 0
    assert z.mean == pytest.approx(statistics.fmean(warm)) and z.mean == pytest.approx(1.1)
    assert z.var == pytest.approx(statistics.pvariance(warm))
    var0 = z.var
    std = var0**0.5
    zscore = (2.0 - 1.1) / (std + 1e-6)
    limit = 1.1 + 2.5**2 * std / zscore
    assert z.factor(2.0) == pytest.approx(limit / (2.0 + 1e-6)) and z.count == 1
    assert z.mean == pytest.approx(0.97 * 1.1 + 0.03 * limit)
    assert z.var == pytest.approx(0.97 * var0 + 0.03 * (limit - z.mean) ** 2)
    assert z.factor(1.12) == 1.0 and z.count == 1  # an ordinary norm passes, joins the EMA


def test_zclip_scales_the_gradients_before_the_step_and_resumes() -> None:
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.ones(4))
    opt = Guarded(torch.optim.SGD([w], lr=0.1), ["zclip"])
    for k in range(30):
        w.grad = torch.full((4,), 0.5 + 0.01 * (k % 3))
        opt.step()
    w.grad = torch.full((4,), 20.0)  # a spike: norm 40
    before = w.detach().clone()
    state = opt.state_dict()
    opt.step()
    moved = (before - w.detach()).norm().item() / 0.1  # the gradient norm the step used
    assert moved < 2.0 and opt.counts() == {"zclipped_steps": 1}
    again = Guarded(torch.optim.SGD([torch.nn.Parameter(before.clone())], lr=0.1), ["zclip"])
    again.load_state_dict(state)
    assert again.guards["zclip"].mean == pytest.approx(state["guards"]["zclip"]["mean"])


@pytest.mark.slow  # one 140-step run: ~8 s; the schedule's factor is tested above by hand
def test_the_protocol_makes_a_six_sigma_loss_spike_in_a_tiny_run(tmp_path) -> None:
    """lr 3e-3 held constant, x100 for 5 steps from step 100 (of 140): the loss's z-score over
    its previous steps (OLMo-core's rule, the spike_score probe) passes 6."""
    done = subprocess.run(
        [sys.executable, "train.py", "model.n_layer=1", "model.n_embd=32", "model.n_head=2",
         "model.block_size=32", "trainer.max_steps=140", "optim.lr=3e-3",
         "optim.warmup_steps=10", "optim.schedule=constant", "optim.spike_at=100",
         "optim.spike_steps=5", "optim.spike_factor=100", "probes.add=[spike_score]",
         "logger=csv", "num_threads=1", f"run_dir={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["spike_steps_loss"] >= 1
