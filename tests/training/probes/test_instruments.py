"""The instruments against independent computations: hand-built attention maps, planted outliers,
numpy's statistics, torch.linalg's spectral norm, AdamW's own step and a model with a block
deleted."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from models.gpt import GPT, GPTConfig
from models.norms import Derf, DyT
from models.vit import ViT, ViTConfig
from runs import metric_names as names
from tests.probe_helpers import TINY, batches, one_thread  # noqa: F401  (autouse)
from training.probe_config import PROBES
from training.probes.forward import run_forward_probes
from training.probes.instruments import (
    AttnSink,
    Headroom,
    LinearOutputs,
    MassiveActivations,
    OutlierKurtosis,
    Saturation,
    first_token_attention,
    massive,
    neuron_kurtosis,
    saturated_share,
    verma_share,
)
from training.probes.spikes import SpikeScore, z_score
from training.probes.weights import AdamState, adam_norms, layer_drop, spectral_norm

INSTRUMENTS = ["AttnSink", "MassiveActivations", "OutlierKurtosis", "LinearOutputs"]
INSTRUMENTS += ["Headroom", "Saturation"]


class HandAttention(torch.nn.Module):
    """An attention whose per-head q and k are given: the probe reads only these."""

    def __init__(self, q: torch.Tensor, k: torch.Tensor) -> None:
        super().__init__()
        self.q, self.k, self.causal = q, k, True
        self.softmax_scale, self.softcap = None, None

    def qk(self, x):
        return self.q, self.k

    def forward(self, x):
        return x


def test_first_token_attention_matches_a_hand_built_map():
    """Head 0: every query (1, 0) meets key 0 at (4, 0) and the others at 0, so row r (seeing
    r + 1 keys) weighs key 0 by e^a / (e^a + r), a = 4 / sqrt(2); head 1 is uniform: 1 / (r + 1)."""
    T = 16
    q = torch.zeros(1, 2, T, 2)
    q[0, 0, :, 0] = 1.0
    k = torch.zeros(1, 2, T, 2)
    k[0, 0, 0, 0] = 4.0
    alpha = first_token_attention(HandAttention(q, k), None)
    a = math.exp(4.0 / math.sqrt(2))
    sink = sum(a / (a + r) for r in range(T)) / T
    uniform = sum(1 / (r + 1) for r in range(T)) / T  # H_16 / 16 = 0.211
    torch.testing.assert_close(alpha, torch.tensor([[sink, uniform]]), rtol=1e-6, atol=1e-7)
    # the measure: head 0 is a sink (> 0.3), head 1 is not
    measure, attn = AttnSink(), HandAttention(q, k)
    for handle in measure.attach(SimpleNamespace(blocks=[SimpleNamespace(attn=attn)])):
        attn(torch.zeros(1))
        handle.remove()
    out = measure.read(None, 0)
    assert out[names.per_layer(names.ATTN_SINK, 0)] == 0.5 and out[names.ATTN_SINK] == 0.5
    assert float(out[names.per_layer(names.ATTN_FIRST, 0)]) == pytest.approx((sink + uniform) / 2)


def test_the_sink_share_thresholds_each_sample_as_gu_et_al():
    """Gu et al. 2025's Sink_1^0.3 is decided per sample, then averaged: one head that is a sink
    in one sample (alpha ~0.9) and uniform in the other (alpha = H_16 / 16 = 0.211) is a sink in
    half the samples, 0.5; thresholding the batch's mean alpha (0.56) would say 1.0."""
    T = 16
    q = torch.zeros(2, 1, T, 2)
    q[0, 0, :, 0] = 1.0
    k = torch.zeros(2, 1, T, 2)
    k[0, 0, 0, 0] = 4.0  # sample 0 only: key 0 stands out
    measure, attn = AttnSink(), HandAttention(q, k)
    for handle in measure.attach(SimpleNamespace(blocks=[SimpleNamespace(attn=attn)])):
        attn(torch.zeros(1))
        handle.remove()
    out = measure.read(None, 0)
    alpha = first_token_attention(attn, None)[:, 0]
    assert float(alpha[0]) > 0.3 > float(alpha[1]) and float(alpha.mean()) > 0.3
    assert float(out[names.ATTN_SINK]) == 0.5
    assert float(out[names.per_layer(names.ATTN_SINK, 0)]) == 0.5


def test_massive_activation_finds_a_planted_outlier():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(2, 5, 7, generator=g)
    h[1, 2, 3] = -900.0
    h[0, 1, 1] = 150.0  # over 100 but not 1000 x the median
    ratio, channel, token, peak, count = massive(h)
    assert (int(channel), int(token)) == (3, 2) and float(peak) == 900.0
    # torch's median of an even count is the lower middle value
    a = np.sort(np.abs(h.numpy()).ravel())
    median = a[(a.size - 1) // 2]
    assert float(ratio) == pytest.approx(900.0 / median, rel=1e-6)
    # Sun et al. 2024: massive means |h| > 100 and > 1000 x the median, both
    assert 150 < 1000 * median < 900 and int(count) == 1
    # the same shape a hundred times smaller: the ratio is unchanged, nothing is over 100
    ratio_small, *_, count_small = massive(h / 100)
    assert float(ratio_small) == pytest.approx(float(ratio), rel=1e-5) and int(count_small) == 0


def test_kurtosis_of_the_neurons_rms_by_hand_and_by_numpy():
    # channels with RMS 1, 1, 1, 3: mean s^4 = 84 / 4 = 21, mean s^2 = 3: Kurt = 21 / 9
    h = torch.tensor([[1.0, -1.0, 1.0, 3.0], [-1.0, 1.0, -1.0, -3.0]])
    assert float(neuron_kurtosis(h)) == pytest.approx(21 / 9)
    assert float(neuron_kurtosis(torch.ones(3, 8))) == pytest.approx(1.0)
    x = torch.randn(4, 6, 16, generator=torch.Generator().manual_seed(1)).numpy()
    s = np.sqrt((x.reshape(-1, 16) ** 2).mean(axis=0))
    expected = (s**4).mean() / (s**2).mean() ** 2
    assert float(neuron_kurtosis(torch.from_numpy(x))) == pytest.approx(expected, rel=1e-5)


def test_spectral_norm_and_stable_rank_against_torch_linalg():
    g = torch.Generator().manual_seed(2)
    u, v = torch.randn(48, 1, generator=g), torch.randn(1, 32, generator=g)
    w = torch.randn(48, 32, generator=g) + 0.5 * u @ v  # a clear top singular value
    exact = torch.linalg.matrix_norm(w, ord=2)
    sigma, vec = spectral_norm(w, torch.randn(32, generator=g), 30)
    assert float(sigma) == pytest.approx(float(exact), rel=1e-4)
    assert float(sigma) <= float(exact) * (1 + 1e-6)  # a Rayleigh quotient: a lower bound
    s = np.linalg.svd(w.numpy(), compute_uv=False)
    assert float(w.square().sum() / sigma**2) == pytest.approx((s**2).sum() / s[0] ** 2, rel=1e-3)
    # a plain Gaussian matrix has a small gap; warm starts close it
    w = torch.randn(64, 64, generator=g)
    start = torch.randn(64, generator=g)
    for _ in range(10):
        sigma, start = spectral_norm(w, start, 20)
    assert float(sigma) == pytest.approx(float(torch.linalg.matrix_norm(w, ord=2)), rel=2e-3)


def test_adam_update_norm_equals_the_step_adamw_takes():
    """With no weight decay, lr * m_hat / (sqrt(v_hat) + eps) is exactly the move of the
    weights; the moments are those of Adam's recursions over the gradients seen."""
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(5, 3))
    opt = torch.optim.AdamW([p], lr=0.1, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.0)
    grads = [torch.randn(5, 3) for _ in range(3)]
    m = v = torch.zeros(5, 3)
    for g in grads:
        before = p.detach().clone()
        p.grad = g
        opt.step()
        m, v = 0.8 * m + 0.2 * g, 0.95 * v + 0.05 * g**2
    out = adam_norms(opt, {"all": [p]}, {id(p): 0.1})
    assert float(out["adam/m/all"]) == pytest.approx(float(m.norm()), rel=1e-5)
    assert float(out["adam/v/all"]) == pytest.approx(float(v.norm()), rel=1e-5)
    moved = float((p.detach() - before).norm())
    assert float(out["adam/update/all"]) == pytest.approx(moved, rel=1e-5)
    assert AdamState(every=1).groups is None  # built at fit start, from the blocks


def test_layer_drop_equals_the_loss_of_the_model_without_that_block():
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY, dropout=0.1))
    x, y = batches(1)[0]
    drops = layer_drop(model, x, y)
    model.eval()
    full = float(model(x, y)[1].detach())
    for i in range(TINY["n_layer"]):
        shorter = copy.deepcopy(model)
        del shorter.blocks[i]
        expected = float(shorter(x, y)[1].detach()) - full
        assert float(drops[names.per_layer(names.LAYER_DROP, i)]) == pytest.approx(
            expected, abs=1e-5
        )
    model.train()
    drops_again = layer_drop(model, x, y)
    assert model.training and drops_again == drops


def test_headroom_reads_the_largest_activation_and_predicts_the_fp16_overflow():
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    x = batches(1)[0][0]
    out = run_forward_probes(model, x, [Headroom()], 0)
    seen = []
    hooks = [
        m.register_forward_hook(lambda m, i, o: seen.append(o.abs().max())) for m in model.blocks
    ]
    logits = model(x)[0]
    for h in hooks:
        h.remove()
    largest = max(float(torch.stack(seen).max()), float(logits.abs().max()))
    assert out[names.HEADROOM_ABSMAX] >= largest - 1e-6
    assert out[names.HEADROOM_FP16] == pytest.approx(math.log2(65504 / out[names.HEADROOM_ABSMAX]))
    bf16_max = float(torch.finfo(torch.bfloat16).max)
    assert out[names.HEADROOM_BF16] == pytest.approx(
        math.log2(bf16_max / out[names.HEADROOM_ABSMAX])
    )
    assert out[names.HEADROOM_FP16] > 0 and finite_in_fp16(model, x)
    with torch.no_grad():  # blow the embeddings up past fp16's range: negative headroom
        model.tok_emb.weight.mul_(2 * 65504 / model.tok_emb.weight.abs().max())
    assert run_forward_probes(model, x, [Headroom()], 0)[names.HEADROOM_FP16] < 0
    assert not finite_in_fp16(model, x)


def finite_in_fp16(model: torch.nn.Module, x: torch.Tensor) -> bool:
    """Whether every block output of an fp16 copy of the model stays finite."""
    half, outputs = copy.deepcopy(model).half(), []
    hooks = [b.register_forward_hook(lambda m, i, o: outputs.append(o)) for b in half.blocks]
    with torch.no_grad():
        half(x)
    for h in hooks:
        h.remove()
    return all(bool(torch.isfinite(o).all()) for o in outputs)


def test_saturation_share_of_dyt_and_derf_by_hand():
    x = torch.tensor([-4.0, -1.0, 0.0, 0.5, 3.0, 10.0])
    dyt, derf = DyT(6, alpha=1.0), Derf(6, alpha=1.0)
    # |tanh(x)| >= 0.99 for |x| >= atanh(0.99) = 2.647: -4, 3, 10
    assert [int(v) for v in saturated_share(dyt, x)] == [3, 6]
    with torch.no_grad():
        derf.shift.fill_(1.0)
    # |erf(x + 1)| >= 0.99 for x + 1 >= 1.822 or <= -1.822: -4, 3, 10 (x=0.5: erf(1.5)=0.966)
    expected = int((np.abs([math.erf(v + 1.0) for v in x.tolist()]) >= 0.99).sum())
    assert [int(v) for v in saturated_share(derf, x)] == [expected, 6]
    # Verma 2026's share: |a x| > 2 (DyT: -4, 3, 10); Derf's reads a x + s: -4 + 1 = -3, 4, 11
    assert [int(v) for v in verma_share(dyt, x)] == [3, 6]
    assert [int(v) for v in verma_share(derf, x)] == [3, 6]
    with torch.no_grad():
        dyt.alpha.fill_(0.5)  # a x: -2 (not > 2), 1.5, 5: one
    assert [int(v) for v in verma_share(dyt, x)] == [1, 6]


def test_saturation_on_models_with_dyt_and_soft_caps():
    torch.manual_seed(0)
    cfg = GPTConfig(**TINY, norm={"name": "dyt"}, attn_softcap=0.5, logit_softcap=0.2)
    model = GPT(cfg)
    x = batches(1)[0][0]
    out = run_forward_probes(model, x, [Saturation()], 0)
    for i in range(TINY["n_layer"]):
        assert 0.0 <= out[f"saturation/norm/layer_{i}"] <= 1.0
        assert 0.0 <= out[f"saturation/attn_cap/layer_{i}"] <= 1.0
    logits = model.eval()(x)[0]
    expected = float((logits.abs() / 0.2 >= 0.99).float().mean())
    assert out["saturation/logit_cap"] == pytest.approx(expected)
    assert "saturation/final_norm" in out


def test_linear_outputs_equal_the_projections_computed_by_hand():
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    x = batches(1)[0][0]
    out = run_forward_probes(model, x, [LinearOutputs()], 0)
    model.eval()
    with torch.no_grad():
        h = model.tok_emb(x) + model.pos_emb(torch.arange(x.shape[1]))
        block = model.blocks[0]
        a = block.attn_pre(h)
        for name in ("q", "k", "v"):
            w = getattr(block.attn, f"{name}_proj")
            rms = (a @ w.weight.T + w.bias).square().mean().sqrt()
            assert out[f"linear_out/{name}/layer_0"] == pytest.approx(float(rms), rel=1e-5)


def test_spike_score_is_olmo_cores_rule_by_numpy():
    history = [1.0 + 0.01 * (i % 3) for i in range(30)]
    z = z_score(2.0, history)
    assert z == pytest.approx(abs(2.0 - np.mean(history)) / np.std(history, ddof=1))
    probe = SpikeScore(sigma=6.0, window=32)
    scores = [probe.score("loss", value, step) for step, value in enumerate([*history[:25], 2.0])]
    assert all(s is None for s in scores[:19]) and scores[19] is not None  # max(20, 32 // 2)
    assert probe.spikes["loss"] == [25] and probe.summary()["spike_steps_loss"] == 1
    assert probe.score("loss", float("nan"), 26) is not None and len(probe.history["loss"]) == 26


@pytest.mark.parametrize("kind", ["gpt", "vit", "ngpt"])
def test_every_instrument_reads_finite_values_on_each_model(kind):
    torch.manual_seed(0)
    if kind == "vit":
        model = ViT(ViTConfig(image_size=8, patch_size=4, n_layer=2, n_head=2, n_embd=16))
        x = torch.randn(3, 1, 8, 8)
    else:
        extra = {"placement": {"name": "ngpt"}} if kind == "ngpt" else {}
        model = GPT(GPTConfig(**TINY, **extra))
        x = batches(1)[0][0]
    measures = [
        AttnSink(),
        MassiveActivations(),
        OutlierKurtosis(),
        LinearOutputs(),
        Headroom(),
        Saturation(),
    ]
    out = run_forward_probes(model, x, measures, 0)
    assert out[names.ATTN_SINK] >= 0 and all(math.isfinite(v) for v in out.values())
    assert len([k for k in out if k.startswith("act_kurtosis/")]) == len(model.blocks)
    assert {PROBES[n].measure for n in PROBES if PROBES[n].measure} >= set(INSTRUMENTS)


def test_instruments_are_added_to_the_default_probes_by_name():
    from training.probe_config import ProbeConfig, default_probes

    cfg = ProbeConfig(add=["spectral", "attn_sink", "grad_norm"])
    assert cfg.enabled == [*default_probes(), "spectral", "attn_sink"]
    assert ProbeConfig(enabled=["act_norm"], add=["headroom"]).enabled == ["act_norm", "headroom"]
    assert ProbeConfig(**vars(cfg)).enabled == cfg.enabled  # folded in once: rebuilding keeps it
    with pytest.raises(ValueError, match=r"unknown probe\(s\) \['sinks'\]"):
        ProbeConfig(add=["sinks"])
    with pytest.raises(ValueError, match="probes.spike_sigma_window must be an integer >= 19"):
        ProbeConfig(spike_sigma_window=2)
