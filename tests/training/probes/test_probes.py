"""Probes and the init-probe against independent computations on tiny models."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint

from models.gpt import GPT, GPTConfig
from models.layers import Attention
from models.vit import ViT, ViTConfig
from tests.probe_helpers import (
    TINY,
    Snapshots,
    TinyTask,
    batches,
    fit,
    flat_norm,
    one_thread,  # noqa: F401  (autouse, module scope)
)
from training.divergence import Divergence
from training.init_probe import init_probe, measure_at_init, random_batches, write_probe_json
from training.probe_config import PROBES, ProbeConfig
from training.probes.attention import MaxAttnLogit, max_attn_logit
from training.probes.forward import run_forward_probes
from training.probes.measures import ActNorm, ModelUpdate
from training.probes.registry import probe_callbacks
from training.sections import DivergenceConfig

EVERY_STEP = ProbeConfig(every={name: 1 for name in PROBES}, batch_size=4)


# ---------------------------------------------------------------- probes inside a real fit


@pytest.fixture(scope="module")
def probed_fit(tmp_path_factory):
    torch.manual_seed(0)
    task = TinyTask(GPT(GPTConfig(**TINY)))
    initial = copy.deepcopy(task.model)
    snaps = Snapshots()
    callbacks = [snaps, *probe_callbacks(EVERY_STEP)]
    # A tiny clip threshold: the logged norms must be those before clipping.
    trainer, logger = fit(
        task, callbacks, 3, tmp_path_factory.mktemp("fit"), gradient_clip_val=1e-4
    )
    return task, initial, snaps, logger, callbacks


def test_grad_norms_equal_norms_of_the_grads_before_clipping(probed_fit):
    task, _, snaps, logger, _ = probed_fit
    for step in range(3):
        grads = snaps.grads[step]
        total = logger.value(step, "grad_norm/total")
        assert total == pytest.approx(flat_norm(grads), rel=1e-5)
        assert total > 1e-3  # far above the clip threshold
        for i in range(TINY["n_layer"]):
            for suffix, prefix in (("", ""), ("/attn", "attn."), ("/mlp", "mlp.")):
                expected = flat_norm(grads, f"blocks.{i}.{prefix}")
                got = logger.value(step, f"grad_norm/layer_{i}{suffix}")
                assert got == pytest.approx(expected, rel=1e-5)
        last = grads[f"blocks.{TINY['n_layer'] - 1}.mlp.fc2.weight"].norm()
        assert logger.value(step, "grad_norm/last_fc2") == pytest.approx(float(last), rel=1e-5)


def manual_forward(model: GPT, idx: torch.Tensor):
    """Block outputs, per-layer max attention logits and logits, computed without the probes."""
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(idx.shape[1]))
    outs, max_logits = [], []
    for block in model.blocks:
        x_in = block.attn_pre(x)
        hs = x_in.shape[-1] // block.attn.n_head
        q = F.linear(x_in, block.attn.q_proj.weight, block.attn.q_proj.bias)
        k = F.linear(x_in, block.attn.k_proj.weight, block.attn.k_proj.bias)
        q, k = q.unflatten(-1, (block.attn.n_head, hs)), k.unflatten(-1, (block.attn.n_head, hs))
        scores = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(hs)
        T = idx.shape[1]
        allowed = torch.arange(T)[None, :] <= torch.arange(T)[:, None]  # key j <= query i
        max_logits.append(float(scores[..., allowed].max()))
        x = block(x)
        outs.append(x)
    return outs, max_logits, model.lm_head(model.final_norm(x))


@torch.no_grad()
def test_forward_probes_equal_a_manual_forward_on_the_val_batch(probed_fit):
    task, initial, snaps, logger, callbacks = probed_fit
    probe_inputs = batches(2, seed=1)[0][0][:4]  # the first val batch, cut to batch_size
    forward_cb = next(c for c in callbacks if hasattr(c, "measures"))
    assert torch.equal(forward_cb.inputs, probe_inputs)
    model = copy.deepcopy(initial).eval()
    ref_logits = manual_forward(model, probe_inputs)[2]
    for step in range(3):
        model.load_state_dict(snaps.weights[step])
        outs, max_logits, logits = manual_forward(model, probe_inputs)
        for i, out in enumerate(outs):
            rms = float(torch.sqrt(torch.mean(out**2)))
            assert logger.value(step, f"act_norm/layer_{i}") == pytest.approx(rms, rel=1e-5)
            got = logger.value(step, f"attn/max_logit/layer_{i}")
            assert got == pytest.approx(max_logits[i], rel=1e-5)
        assert logger.value(step, "attn/max_logit") == pytest.approx(max(max_logits), rel=1e-5)
        # RMS over the B*T positions of each position's logit-difference L2 norm
        expected = float((logits - ref_logits).norm(dim=-1).pow(2).mean().sqrt())
        update = logger.value(step, "update/model")
        assert update == pytest.approx(expected, rel=1e-4, abs=1e-7)
        assert (update == 0.0) if step == 0 else (update > 1e-3)
    assert task.model.training  # the probe pass restored train mode


def test_max_attn_logit_by_hand():
    attn = Attention(n_embd=2, n_head=1, causal=True)
    with torch.no_grad():
        attn.q_proj.weight.copy_(torch.eye(2))
        attn.k_proj.weight.copy_(torch.tensor([[0.0, 1.0], [0.0, 0.0]]))  # k = (x_1, 0)
        attn.q_proj.bias.zero_()
        attn.k_proj.bias.zero_()
    x = torch.tensor([[[1.0, 0.0], [0.0, 3.0]]])  # q0=(1,0) q1=(0,3); k0=(0,0) k1=(3,0)
    # only the future pair (query 0, key 1) has a nonzero score, 3 / sqrt(2)
    assert float(max_attn_logit(attn, x).detach()) == 0.0
    attn.causal = False
    assert float(max_attn_logit(attn, x).detach()) == pytest.approx(3 / math.sqrt(2))


def test_forward_probes_on_a_vit_keep_train_mode_and_start_at_zero_update():
    torch.manual_seed(0)
    vit = ViT(ViTConfig(n_layer=2, n_head=2, n_embd=16))
    images = torch.randn(3, 1, 8, 8)
    out = run_forward_probes(vit, images, [ActNorm(), MaxAttnLogit(), ModelUpdate()], step=0)
    assert out["update/model"] == 0.0
    assert sorted(k for k in out if k.startswith("act_norm")) == [
        "act_norm/layer_0",
        "act_norm/layer_1",
    ]
    assert vit.training


def test_probe_config_rejects_unknown_names_and_bad_intervals():
    with pytest.raises(ValueError, match="choose from: grad_norm"):
        ProbeConfig(enabled=["grad_norms"])
    with pytest.raises(ValueError, match=">= 1"):
        ProbeConfig(every={"update": 0})
    assert ProbeConfig(every={"update": 5}).interval("update") == 5
    names = [type(c).__name__ for c in probe_callbacks(ProbeConfig(enabled=["update"]))]
    assert names == ["ForwardProbes"]  # the build adds Divergence after the probes


# ---------------------------------------------------------------- divergence


def test_check_loss_uses_the_mean_of_the_first_losses():
    div = Divergence(DivergenceConfig(loss_factor=3.0, ref_steps=2))
    assert div.check_loss(4.0) is None and div.check_loss(2.0) is None
    assert div.ref_loss == 3.0
    assert div.check_loss(8.9) is None
    assert "initial" in div.check_loss(9.1)
    assert "non-finite" in div.check_loss(float("inf"))


def test_nan_loss_stops_at_that_step_and_leaves_no_good_checkpoint(tmp_path):
    torch.manual_seed(0)
    task = TinyTask(GPT(GPTConfig(**TINY)), nan_at=2)
    ckpt = ModelCheckpoint(
        dirpath=tmp_path / "ckpt", save_last=True, save_top_k=-1, every_n_train_steps=1
    )
    # a fixed file name, overwritten in place, saved last before the divergence
    fixed = ModelCheckpoint(
        dirpath=tmp_path / "fixed",
        filename="last",
        enable_version_counter=False,
        every_n_train_steps=2,
    )
    div = Divergence()
    trainer, _ = fit(task, [div, ckpt, fixed], 8, tmp_path)
    assert div.status == "diverged" and div.diverged_at_step == 2
    # a module without a record of its own gets one, which the callback reports to
    assert task.record.status == "diverged" and task.record.diverged_at_step == 2
    assert task.record.divergence_reason == "non-finite gradient"  # seen before the loss
    assert task.steps_run == 3  # steps 0, 1, 2 and no more
    assert all(torch.isfinite(p).all() for p in task.model.parameters())  # NaN step skipped
    # untracked files (saved after steps 0 and 1) stay; the tracked latest and last are set aside
    files = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert files == [
        "epoch=0-step=1.ckpt",
        "epoch=0-step=2.ckpt",
        "epoch=0-step=3.diverged.ckpt",
        "last.diverged.ckpt",
    ]
    assert sorted(p.name for p in (tmp_path / "fixed").iterdir()) == ["last.diverged.ckpt"]
    assert fixed.best_model_path.endswith("last.diverged.ckpt")
    saved = torch.load(tmp_path / "ckpt" / "last.diverged.ckpt", weights_only=False)
    states = [s for k, s in saved["callbacks"].items() if k.startswith("Divergence")]
    assert set(states[0]) == {"ref_loss", "_first_losses"}  # the outcome is the record's


def test_huge_learning_rate_diverges_early(tmp_path):
    torch.manual_seed(0)
    task = TinyTask(GPT(GPTConfig(**TINY)), lr=1e3)
    div = Divergence(DivergenceConfig(checkpoint="keep"))
    trainer, _ = fit(task, [div], 20, tmp_path)
    assert div.status == "diverged" and div.diverged_at_step is not None
    assert task.steps_run == div.diverged_at_step + 1 < 20
    assert task.record.diverged_at_step == div.diverged_at_step


def test_a_healthy_run_completes(tmp_path):
    torch.manual_seed(0)
    task = TinyTask(GPT(GPTConfig(**TINY)), lr=1e-3)
    div = Divergence()
    fit(task, [div], 4, tmp_path)
    assert div.status == "completed" and div.diverged_at_step is None
    assert task.steps_run == 4


# ---------------------------------------------------------------- init-probe (F1)


def test_init_probe_values_match_a_direct_backward():
    cfg = GPTConfig(**TINY, placement="post")
    ((x, y),) = random_batches(cfg, 1, 4, seed=0)
    result = init_probe(cfg, (x, y), placements=["post"], depths=[3], seeds=[7])
    torch.manual_seed(7)
    model = GPT(cfg)
    _, loss = model(x, y)
    loss.backward()
    run = result["runs"][0]
    assert run["last_fc2_grad_norm"]["mean"] == pytest.approx(
        float(model.blocks[-1].mlp.fc2.weight.grad.norm()), rel=1e-5
    )
    layer0 = torch.cat([p.grad.flatten() for p in model.blocks[0].parameters()]).norm()
    assert run["grad_norm/layer"]["mean"][0] == pytest.approx(float(layer0), rel=1e-5)
    assert run["n_samples"] == 1 and run["last_fc2_grad_norm"]["std"] == 0.0
    assert measure_at_init(model, x, y)["loss"][0] == pytest.approx(float(loss.detach()), rel=1e-6)


def test_init_probe_profiles_admin_as_training_does():
    """Admin with every omega at 1 is Post-LN; the probe sets the omegas from the first batch
    (Stack.profile_init, as a fresh run's fit does), so it measures Admin, not Post-LN."""
    cfg = GPTConfig(**TINY, placement="admin")
    ((x, y),) = random_batches(cfg, 1, 4, seed=0)
    result = init_probe(cfg, (x, y), placements=["admin"], depths=[3], seeds=[7])
    torch.manual_seed(7)
    model = GPT(cfg)
    model.profile_init(x)
    assert any(float(p.max()) > 1.0 for n, p in model.named_parameters() if "omega" in n)
    _, loss = model(x, y)
    loss.backward()
    run = result["runs"][0]
    assert run["last_fc2_grad_norm"]["mean"] == pytest.approx(
        float(model.blocks[-1].mlp.fc2.weight.grad.norm()), rel=1e-5
    )


def test_init_probe_reproduces_f1_direction(tmp_path):
    """Xiong 2020: last-layer fc2 grad flat in depth for Post-LN, falling ~1/sqrt(L) for Pre-LN;
    the residual stream flat across layers for Post-LN, growing for Pre-LN."""
    cfg = GPTConfig(vocab_size=32, block_size=16, n_head=2, n_embd=32)
    data = random_batches(cfg, 2, 4, seed=0)
    result = init_probe(cfg, data, placements=["post", "pre"], depths=[2, 24], seeds=[0, 1])
    fc2 = {(r["placement"], r["n_layer"]): r["last_fc2_grad_norm"]["mean"] for r in result["runs"]}
    assert 0.6 < fc2["post", 24] / fc2["post", 2] < 1.6
    assert fc2["pre", 24] / fc2["pre", 2] < 0.5  # 1/sqrt(12) = 0.29
    act = {(r["placement"], r["n_layer"]): r["act_norm"]["mean"] for r in result["runs"]}
    assert act["pre", 24][-1] > 3 * act["pre", 24][0]
    assert act["post", 24][-1] == pytest.approx(act["post", 24][0], rel=0.1)
    assert result["depth_slopes"]["pre"] < -0.3 < result["depth_slopes"]["post"]
    path = write_probe_json(result, tmp_path / "probe.json")
    assert json.loads(path.read_text())["runs"][0]["placement"] == "post"
