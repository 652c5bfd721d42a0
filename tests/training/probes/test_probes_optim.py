"""Probes of the optimization (update ratio, sharpness, loss spikes), z-loss, and the guarantee
that probing never changes the training."""

from __future__ import annotations

import copy
import csv
import json
import math
import statistics

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call
from torch.nn.attention import SDPBackend, sdpa_kernel

import train
from models.gpt import GPT, GPTConfig
from models.kernels import unfused
from runs.summary import problems
from tests.probe_helpers import TINY, Snapshots, TinyTask, batches, fit
from training.loggers import SECTIONS
from training.optim import build_adamw, z_loss_term
from training.optim_config import OptimConfig, lr_multiplier
from training.probe_config import PROBES, ProbeConfig
from training.probes.registry import probe_callbacks
from training.probes.sharpness import sharpness, top_eigenvalue
from training.probes.spikes import LossSpikes
from training.task import LanguageModelTask


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------- update ratio


def test_update_ratio_is_the_relative_change_of_each_block_over_one_step(tmp_path):
    torch.manual_seed(0)
    task = TinyTask(GPT(GPTConfig(**TINY)))
    snaps = Snapshots()
    probes = ProbeConfig(enabled=["update_ratio"], every={"update_ratio": 1})
    # clipping at 0.5 changes the update: the probe must see the step the optimizer really took
    _, logger = fit(task, [snaps, *probe_callbacks(probes)], 4, tmp_path, gradient_clip_val=0.5)
    for step in range(3):  # weights at the start of step s + 1 are those after step s
        before, after = snaps.weights[step], snaps.weights[step + 1]
        ratios = []
        for i in range(TINY["n_layer"]):
            keys = [k for k in before if k.startswith(f"blocks.{i}.")]
            old = torch.cat([before[k].flatten() for k in keys])
            new = torch.cat([after[k].flatten() for k in keys])
            ratios.append(float((new - old).norm() / old.norm()))
            got = logger.value(step, f"update_ratio/layer_{i}")
            assert got == pytest.approx(ratios[-1], rel=1e-5)
        assert logger.value(step, "update_ratio/max") == pytest.approx(max(ratios), rel=1e-5)
        assert max(ratios) > 1e-4


# ---------------------------------------------------------------- sharpness


def explicit_hessian(model: GPT, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The full Hessian of the eval-mode loss over the flattened parameters."""
    names, params = zip(*model.named_parameters(), strict=True)
    flat = torch.cat([p.detach().reshape(-1) for p in params])

    def loss_of(v: torch.Tensor) -> torch.Tensor:
        chunks = v.split([p.numel() for p in params])
        weights = {n: c.view_as(p) for n, c, p in zip(names, chunks, params, strict=True)}
        return functional_call(model, weights, (x, y))[1]

    model.eval()
    with sdpa_kernel(SDPBackend.MATH), unfused():  # the composite ops have second derivatives
        hessian = torch.autograd.functional.hessian(loss_of, flat)
    model.train()
    return hessian.double()


def adam_preconditioner_by_hand(opt: torch.optim.Optimizer, model: GPT) -> torch.Tensor:
    """Cohen et al. 2022: P = (1 - b1^t) (sqrt(v_t / (1 - b2^t)) + eps), entry by entry."""
    parts = []
    for p in model.parameters():
        group = next(g for g in opt.param_groups if any(q is p for q in g["params"]))
        state = opt.state[p]
        t, (b1, b2) = int(state["step"]), group["betas"]
        v_hat = state["exp_avg_sq"] / (1 - b2**t)
        parts.append(((1 - b1**t) * (torch.sqrt(v_hat) + group["eps"])).flatten())
    return torch.cat(parts).double()


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_sharpness_equals_the_top_eigenvalue_of_the_explicit_hessian(norm):
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=2, n_embd=4, norm=norm)
    model = GPT(GPTConfig(**{**cfg.__dict__, "qk_norm": True}))
    x, y = torch.randint(0, 5, (3, 4)), torch.randint(0, 5, (3, 4))
    opt = build_adamw(model, OptimConfig(lr=1e-2))
    for _ in range(3):  # a few steps, so Adam holds second moments
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    hessian = explicit_hessian(model, x, y)
    top = float(torch.linalg.eigvalsh(hessian)[-1])
    scale = adam_preconditioner_by_hand(opt, model).rsqrt()
    top_pre = float(torch.linalg.eigvalsh(scale[:, None] * hessian * scale[None, :])[-1])
    grads_before = [p.grad.clone() for p in model.parameters()]
    out = sharpness(model, x, y, iters=300, seed=1, optimizer=opt)
    assert float(out["sharpness/hessian"]) == pytest.approx(top, rel=1e-4)
    assert float(out["sharpness/preconditioned"]) == pytest.approx(top_pre, rel=1e-4)
    assert all(
        torch.equal(a, p.grad) for a, p in zip(grads_before, model.parameters(), strict=True)
    )
    assert model.training


def test_power_iteration_finds_the_top_eigenvalue_behind_a_larger_negative_one():
    eigenvalues = torch.tensor([-9.0, -1.0, 0.5, 2.0, 3.0], dtype=torch.float64)
    q, _ = torch.linalg.qr(
        torch.randn(5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    )
    matrix = q @ torch.diag(eigenvalues) @ q.T
    start = torch.ones(5, dtype=torch.float64)
    assert float(top_eigenvalue(lambda v: matrix @ v, start, 200)) == pytest.approx(3.0, rel=1e-6)
    positive = q @ torch.diag(eigenvalues.abs()) @ q.T  # dominant 9 on the positive side
    assert float(top_eigenvalue(lambda v: positive @ v, start, 200)) == pytest.approx(9.0, rel=1e-6)


def test_sharpness_probe_logs_at_its_interval_and_starts_preconditioned_after_step_0(tmp_path):
    torch.manual_seed(0)
    task = TinyTask(GPT(GPTConfig(**TINY)))
    probes = ProbeConfig(enabled=["sharpness"], every={"sharpness": 2}, sharpness={"iters": 3})
    _, logger = fit(task, probe_callbacks(probes), 5, tmp_path)
    logged = {s: set(m) for s, m in logger.rows if any(k.startswith("sharpness") for k in m)}
    assert logged == {
        0: {"sharpness/hessian"},
        2: {"sharpness/hessian", "sharpness/preconditioned"},
        4: {"sharpness/hessian", "sharpness/preconditioned"},
    }


# ---------------------------------------------------------------- loss spikes


def count_spikes_by_hand(losses: list[float], factor: float, window: int) -> list[int]:
    return [
        s
        for s in range(1, len(losses))
        if losses[s] > factor * statistics.median(losses[max(0, s - window) : s])
    ]


def test_loss_spikes_against_the_running_median_of_the_previous_window():
    g = torch.Generator().manual_seed(0)
    losses = (3.0 - torch.linspace(0, 1.5, 300) + 0.05 * torch.rand(300, generator=g)).tolist()
    for s in (40, 41, 150, 299):
        losses[s] *= 2.5
    losses[200] *= 1.45  # under the factor: no spike
    for window in (100, 7):
        probe = LossSpikes(factor=1.5, window=window)
        flagged = [s for s, loss in enumerate(losses) if probe.observe(loss, s)]
        assert flagged == count_spikes_by_hand(losses, 1.5, window)
        assert probe.count == len(flagged) and probe.summary() == {"loss_spikes": len(flagged)}
    assert flagged == [40, 41, 150, 299]


def test_loss_spikes_are_counted_in_a_fit_and_logged(tmp_path):
    torch.manual_seed(0)
    task = TinyTask(GPT(GPTConfig(**TINY)), lr=0.3)  # a high lr: the loss jumps around
    probes = ProbeConfig(enabled=["loss_spikes"], every={"loss_spikes": 1}, spike_factor=1.05)
    losses = []

    class Losses(Snapshots):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            losses.append(float(outputs["loss"]))

    callbacks = [Losses(), *probe_callbacks(probes)]
    _, logger = fit(task, callbacks, 12, tmp_path)
    spikes = next(c for c in callbacks if isinstance(c, LossSpikes))
    assert spikes.spike_steps == count_spikes_by_hand(losses, 1.05, 100)
    assert logger.value(11, "train/loss_spikes") == spikes.count > 0


# ---------------------------------------------------------------- z-loss


def test_z_loss_term_by_hand():
    logits = torch.tensor([[[0.0, 0.0], [1.0, 3.0]]])
    log_z = torch.log(torch.exp(logits).sum(-1))  # log 2 and log(e + e^3)
    assert float(z_loss_term(logits, 1e-4)) == pytest.approx(float(1e-4 * (log_z**2).mean()))


def test_z_loss_trains_on_ce_plus_z_and_logs_them_apart(tmp_path):
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    reference = copy.deepcopy(model)
    cfg = OptimConfig(lr=1e-2, warmup_steps=0, z_loss=0.05)
    task = LanguageModelTask(model, cfg, total_steps=1)
    _, logger = fit(task, [], 1, tmp_path, log_every_n_steps=1)
    x, y = batches(1)[0]
    logits, ce = reference(x, y)
    z = 0.05 * torch.logsumexp(logits, -1).pow(2).mean()
    assert logger.value(0, "train/loss") == pytest.approx(float(ce), rel=1e-6)
    assert logger.value(0, "train/z_loss") == pytest.approx(float(z), rel=1e-5)
    opt = build_adamw(reference, cfg)
    for group in opt.param_groups:
        group["lr"] = cfg.lr * lr_multiplier(0, cfg, 1)
    (F.cross_entropy(logits.flatten(0, 1), y.flatten()) + z).backward()
    opt.step()
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7, msg=name)


def test_z_loss_must_not_be_negative():
    with pytest.raises(ValueError, match="optim.z_loss must be >= 0"):
        OptimConfig(z_loss=-1e-4)


# ---------------------------------------------------------------- probes never change training


def run_losses(tmp_path, probes: ProbeConfig) -> tuple[list[float], dict]:
    torch.manual_seed(0)
    model = GPT(GPTConfig(**{**TINY, "dropout": 0.1, "qk_norm": True}))
    cfg = OptimConfig(lr=3e-2, warmup_steps=2, z_loss=1e-3)
    task = LanguageModelTask(model, cfg, total_steps=6, seed=0)
    _, logger = fit(task, probe_callbacks(probes), 6, tmp_path, log_every_n_steps=1)
    losses = [m["train/loss"] for _, m in logger.rows if "train/loss" in m]
    return losses, model.state_dict()


def test_every_probe_on_leaves_the_losses_and_weights_bit_identical(tmp_path):
    everything = ProbeConfig(
        enabled=list(PROBES), every={n: 1 for n in PROBES}, batch_size=4, sharpness={"iters": 2}
    )
    probed, probed_weights = run_losses(tmp_path / "on", everything)
    plain, plain_weights = run_losses(tmp_path / "off", ProbeConfig(enabled=[]))
    assert len(plain) == 6 and probed == plain  # equal floats, to the last bit
    for key, value in plain_weights.items():
        assert torch.equal(probed_weights[key], value), key


# ---------------------------------------------------------------- wired into train.py


def test_train_run_logs_every_probe_and_writes_loss_spikes(tmp_path, tiny_run, compose_cfg):
    every = [f"+probes.every.{n}=1" for n in PROBES]
    enabled = "probes.enabled=[" + ",".join(PROBES) + "]"
    over = [*tiny_run, enabled, *every, "probes.sharpness.iters=2", "optim.z_loss=1e-4"]
    summary = train.run(compose_cfg([*over, f"run_dir={tmp_path}"]))
    assert summary["status"] == "completed" and summary["loss_spikes"] == 0
    assert summary["spike_steps_loss"] == summary["spike_steps_grad"] == 0
    assert problems(json.loads((tmp_path / "summary.json").read_text())) == []
    with (tmp_path / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    columns = [c for c in rows[0] if c not in ("step", "epoch", "lr")]
    for name in (
        "attn/entropy/layer_0",
        "attn/entropy_min/layer_0",
        "act_max/layer_0",
        "logits/log_z",
        "block_cos/layer_0",
        "update_ratio/layer_0",
        "update_ratio/max",
        "sharpness/hessian",
        "sharpness/preconditioned",
        "train/loss_spikes",
        "train/z_loss",
        "attn/sink",
        "attn/sink/layer_0",
        "act_massive/layer_0",
        "act_kurtosis/layer_0",
        "linear_out/fc2/layer_0",
        "headroom/fp16",
        "spectral/q/layer_0",
        "stable_rank/fc2/layer_0",
        "adam/update/layer_0",
        "adam/update/total",
        "layer_drop/layer_0",
    ):
        values = [float(r[name]) for r in rows if r[name]]
        assert values and all(math.isfinite(v) for v in values), name
    assert {c.split("/")[0] for c in columns} <= set(SECTIONS)


def test_last_fc2_reads_the_effective_weights_gradient_under_weight_norm():
    """W = g v / ||v|| is computed at each access and has no .grad of its own; the probe's
    dL/dW, rebuilt from dL/dg and dL/dv, equals autograd's gradient of a plain Linear holding
    the same W."""
    from torch.nn.utils.parametrizations import weight_norm

    from training.probes.gradients import weight_grad

    torch.manual_seed(0)
    plain = torch.nn.Linear(5, 4)
    normed = weight_norm(torch.nn.Linear(5, 4), name="weight", dim=0)
    with torch.no_grad():
        normed.parametrizations.weight.original1.copy_(torch.randn(4, 5))
        normed.parametrizations.weight.original0.copy_(torch.rand(4, 1) + 0.5)
        plain.weight.copy_(normed.weight)
        plain.bias.copy_(normed.bias)
    x = torch.randn(7, 5)
    for layer in (plain, normed):
        (layer(x) ** 3).sum().backward()
    assert weight_grad(plain) is plain.weight.grad
    torch.testing.assert_close(weight_grad(normed), plain.weight.grad, rtol=1e-5, atol=1e-6)
    assert weight_grad(normed).abs().sum() > 0
