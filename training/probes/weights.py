"""Instruments of the weights, the optimizer state and the layers' use (off unless named in
``probes.enabled``; none changes training):

spectral/{q,k,v,proj,fc1,fc2}/layer_{i}   sigma_max(W) of that matrix by power iteration on
                             W^T W (what sigmaReparam divides by, Zhai et al. 2023; what the
                             weight-decay rule of Fan et al. 2025 acts on); each matrix keeps its
                             last singular vector, so the iteration warm-starts where it stopped
stable_rank/{...}/layer_{i}  ||W||_F^2 / sigma_max^2: 1 for a rank-one W, the width for an
                             orthogonal one
adam/m/layer_{i}, adam/v/layer_{i}   ||m||, ||v||: Adam's first and second moments over the
                             block's parameters after the step
adam/update/layer_{i}, /total   ||lr * m_hat / (sqrt(v_hat) + eps)||, m_hat = m / (1 - b1^t),
                             v_hat = v / (1 - b2^t): the step's Adam update without weight decay,
                             at the rate the step used (Marin saw its spikes come before the loss
                             spikes, larger in the lower layers)
layer_drop/layer_{i}         the probe batch's loss with block i skipped (its output := its input)
                             minus the loss with every block, in eval mode (Sun et al. 2025)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from lightning.pytorch.callbacks import Callback
from torch import nn

from runs import metric_names as names
from training.probes.common import Every, blocks_of, log_to_loggers, to_floats
from training.probes.forward import ProbeBatchCallback
from training.probes.gradients import group_norms
from training.probes.sharpness import power_iteration


def block_matrices(block: nn.Module) -> dict[str, torch.Tensor]:
    """A block's weight matrices by short name (q, k, v, proj, fc1, fc2)."""
    attn, mlp = block.attn, block.mlp
    pairs = {"q": attn.q_proj, "k": attn.k_proj, "v": attn.v_proj, "proj": attn.out_proj}
    return {**{n: m.weight for n, m in pairs.items()}, "fc1": mlp.fc1.weight, "fc2": mlp.fc2.weight}


def spectral_norm(
    w: torch.Tensor, v: torch.Tensor, iters: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sigma_max(w), the right singular vector reached) after ``iters`` power-iteration steps on
    w^T w from ``v``; sigma is a lower bound that tightens with every step."""
    w = w.detach().float()
    state = {}

    def matvec(x: torch.Tensor) -> torch.Tensor:
        state["v"] = x
        return w.T @ (w @ x)

    lam = power_iteration(matvec, v.to(w), iters)
    return lam.clamp_min(0).sqrt().float(), state.get("v", v)


class Spectral(Every, Callback):
    """spectral/* and stable_rank/* every ``every`` optimizer steps, at the step's start."""

    def __init__(self, every: int = 100, iters: int = 20) -> None:
        self.every, self.iters = every, iters
        self.vectors: dict[str, torch.Tensor] = {}
        self._last_step = -1

    @torch.no_grad()
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        if not self.due(step):
            return
        generator = torch.Generator().manual_seed(step)  # the run's own streams stay untouched
        values = {}
        for i, block in enumerate(blocks_of(pl_module)):
            for name, w in block_matrices(block).items():
                key = names.per_layer(f"{names.SPECTRAL}/{name}", i)
                start = self.vectors.get(key)
                if start is None or start.numel() != w.shape[1]:
                    start = torch.randn(w.shape[1], generator=generator)
                sigma, self.vectors[key] = spectral_norm(w, start.to(w.device), self.iters)
                values[key] = sigma
                frobenius = w.detach().float().square().sum()
                rank_key = names.per_layer(f"{names.STABLE_RANK}/{name}", i)
                values[rank_key] = frobenius / sigma.square().clamp_min(1e-30)
        log_to_loggers(trainer, to_floats(values), step)

    def state_dict(self) -> dict:
        return {"vectors": {k: v.cpu() for k, v in self.vectors.items()}}

    def load_state_dict(self, state_dict: dict) -> None:
        self.vectors = dict(state_dict.get("vectors", {}))


def adam_norms(
    optimizer: torch.optim.Optimizer, groups: dict[str, list], lrs: dict[int, float]
) -> dict[str, torch.Tensor]:
    """adam/{m,v,update}/<group> from the optimizer's state after its step (parameters without
    Adam moments, e.g. under Muon or SGD, count as 0); ``lrs``: id(param) -> the rate it used."""
    moments: dict[str, dict[int, torch.Tensor]] = {"m": {}, "v": {}, "update": {}}
    settings = {id(p): g for g in optimizer.param_groups for p in g["params"]}
    for p in (p for group in groups.values() for p in group):
        state = optimizer.state.get(p, {})
        if "exp_avg" not in state or "exp_avg_sq" not in state or id(p) not in settings:
            continue
        group = settings[id(p)]
        (b1, b2), eps, t = group["betas"], group.get("eps"), float(state["step"])
        m, v = state["exp_avg"].detach(), state["exp_avg_sq"].detach()
        moments["m"][id(p)], moments["v"][id(p)] = m, v
        m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
        lr = lrs.get(id(p), group["lr"])
        if "atan2_a" in group:  # Adam-atan2 (training/optim.py): a atan2(m_hat, b sqrt(v_hat))
            step = group["atan2_a"] * torch.atan2(m_hat, group["atan2_b"] * v_hat.sqrt())
        else:
            step = m_hat / (v_hat.sqrt() + eps)
        moments["update"][id(p)] = lr * step
    out = {}
    for kind, tensors in moments.items():
        prefix = {"m": names.ADAM_M, "v": names.ADAM_V, "update": names.ADAM_UPDATE}[kind]
        out.update({f"{prefix}/{k}": n for k, n in group_norms(groups, tensors).items()})
    return out


class AdamState(Callback):
    """adam/* every ``every`` optimizer steps: the moments after step s and its update."""

    def __init__(self, every: int = 10) -> None:
        self.every = every
        self.groups: dict[str, list] | None = None
        self.lrs: dict[int, float] | None = None
        self.step = -1

    def on_fit_start(self, trainer, pl_module) -> None:
        blocks = blocks_of(pl_module)
        self.groups = {f"layer_{i}": list(b.parameters()) for i, b in enumerate(blocks)}
        self.groups["total"] = list(pl_module.parameters())

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        step = trainer.global_step
        if step % self.every or self.groups is None:
            return
        self.lrs = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.lrs is None or not trainer.optimizers:
            return
        lrs, self.lrs = self.lrs, None
        values = adam_norms(trainer.optimizers[0], self.groups, lrs)
        log_to_loggers(trainer, to_floats(values), self.step)


class LayerDrop(Every, ProbeBatchCallback):
    """layer_drop/layer_{i} every ``every`` optimizer steps, at the step's start."""

    def __init__(self, every: int = 100, batch_size: int = 8, probe_batch=None) -> None:
        super().__init__(batch_size, probe_batch)
        self.every = every
        self._last_step = -1

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        if self.targets is None:
            raise ValueError(
                "the layer_drop probe needs a probe batch with targets (inputs, targets); "
                "drop layer_drop from probes.enabled or pass probe_batch=(inputs, targets)"
            )

    @torch.no_grad()
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        if not self.due(step):
            return
        model, device = pl_module.model, pl_module.device
        inputs = trainer.precision_plugin.convert_input(self.inputs.to(device))
        context = trainer.precision_plugin.forward_context
        values = layer_drop(model, inputs, self.targets.to(device), context)
        log_to_loggers(trainer, to_floats(values), step)


@torch.no_grad()
def layer_drop(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> dict[str, torch.Tensor]:
    """Loss without block i minus the full loss, per block, in eval mode (train mode restored)."""

    def loss() -> torch.Tensor:
        with context():
            return model(inputs, targets)[1].float()

    was_training = model.training
    model.eval()
    try:
        full, out = loss(), {}
        for i, block in enumerate(model.blocks):
            handle = block.register_forward_hook(lambda module, args, output: args[0])
            try:
                out[names.per_layer(names.LAYER_DROP, i)] = loss() - full
            finally:
                handle.remove()
    finally:
        model.train(was_training)
    return out
