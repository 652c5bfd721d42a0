"""grad_norm/*: gradient norms of batch s, read before the optimizer step.

grad_norm/total            L2 norm over all gradients of the LightningModule
grad_norm/layer_{i}        all parameters of blocks[i]: attention, MLP and its norm slots
grad_norm/layer_{i}/attn   blocks[i].attn (q, k, v, out projections)
grad_norm/layer_{i}/mlp    blocks[i].mlp (fc1, fc2)
grad_norm/last_fc2         blocks[-1].mlp.fc2.weight (Xiong et al. 2020, Thm 1)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from lightning.pytorch.callbacks import Callback
from torch import nn

from runs import metric_names as names
from training.probes.common import blocks_of, log_to_loggers, to_floats


def grad_norm_groups(module: nn.Module, blocks: Sequence[nn.Module]) -> dict[str, list]:
    """Metric name -> the parameters whose gradients it measures."""
    groups = {names.GRAD_TOTAL: list(module.parameters())}
    for i, block in enumerate(blocks):
        layer = names.per_layer(names.GRAD_NORM, i)
        groups[layer] = list(block.parameters())
        groups[f"{layer}/attn"] = list(block.attn.parameters())
        groups[f"{layer}/mlp"] = list(block.mlp.parameters())
    groups[names.LAST_FC2] = [EffectiveWeight(blocks[-1].mlp.fc2)]
    return groups


class EffectiveWeight:
    """The weight a Linear multiplies by, as a group member whose ``grad`` is dL/dW also when
    a parametrization computes W from other parameters (weight norm: W = g v / ||v||, whose
    own ``weight`` has no gradient: torch computes it afresh at each access)."""

    def __init__(self, linear: nn.Linear) -> None:
        self.linear = linear

    @property
    def grad(self) -> torch.Tensor | None:
        return weight_grad(self.linear)


def weight_grad(linear: nn.Linear) -> torch.Tensor | None:
    """dL/dW of ``linear``. Under weight norm (rows w_i = g_i v_i / ||v_i||, u_i = v_i / ||v_i||)
    dL/dv_i = (g_i / ||v_i||) (G_i - (G_i . u_i) u_i) and dL/dg_i = G_i . u_i, so
    G_i = (||v_i|| / g_i) dL/dv_i + (dL/dg_i) u_i (exact where g_i != 0). Under sigmaReparam
    (W = gamma V / sigma, sigma = v^T V u with u, v held fixed) dL/dV = (gamma / sigma)(G -
    (G . V / sigma) v u^T) and dL/dgamma = G . V / sigma, so G = (sigma / gamma) dL/dV +
    dL/dgamma v u^T."""
    from torch.nn.utils import parametrize

    from models.init import SigmaReparam

    if not parametrize.is_parametrized(linear, "weight"):
        return linear.weight.grad
    p = linear.parametrizations.weight
    if isinstance(p[0], SigmaReparam):
        reparam, w = p[0], p.original
        if w.grad is None or reparam.gamma.grad is None:
            return None
        sigma = reparam.v @ w.detach() @ reparam.u
        gamma = reparam.gamma.detach()
        return (sigma / gamma) * w.grad + reparam.gamma.grad * torch.outer(reparam.v, reparam.u)
    g, v = p.original0, p.original1  # (out, 1), (out, in): weight_norm over dim 0
    if g.grad is None or v.grad is None:
        return None
    norm = v.detach().norm(dim=1, keepdim=True)
    return (norm / g.detach()) * v.grad + g.grad * (v.detach() / norm)


def group_norms(
    groups: dict[str, list], tensors: dict[int, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """L2 norm of each group's tensors (``tensors`` maps id(parameter) -> the tensor to measure;
    parameters absent from it count as 0), as 0-d tensors.

    One fused per-tensor norm pass, then squared norms summed per group with one index_add.
    """
    ids = list(dict.fromkeys(id(p) for group in groups.values() for p in group if id(p) in tensors))
    if not ids:
        return {name: torch.zeros(()) for name in groups}
    device = tensors[ids[0]].device
    # float64 so squared norms of exploding gradients stay finite (MPS has no float64)
    acc = torch.float32 if device.type == "mps" else torch.float64
    norms = torch._foreach_norm([tensors[i] for i in ids], 2, dtype=torch.float32)
    squares = torch.stack(norms).to(acc).square()
    where = {pid: k for k, pid in enumerate(ids)}
    group_idx, param_idx = [], []
    for g, group in enumerate(groups.values()):
        for p in group:
            if id(p) in where:
                group_idx.append(g)
                param_idx.append(where[id(p)])
    sums = torch.zeros(len(groups), dtype=acc, device=device)
    sums.index_add_(
        0,
        torch.tensor(group_idx, device=device),
        squares[torch.tensor(param_idx, device=device)],
    )
    return dict(zip(groups, sums.sqrt().unbind(), strict=True))


def group_grad_norms(groups: dict[str, list]) -> dict[str, torch.Tensor]:
    """L2 norm of each group's gradients (absent gradients count as 0), as 0-d tensors."""
    grads = {id(p): p.grad for group in groups.values() for p in group if p.grad is not None}
    return group_norms(groups, grads)


class GradNormProbe(Callback):
    """grad_norm/* every ``every`` optimizer steps, before clipping and after AMP unscaling."""

    def __init__(self, every: int = 1) -> None:
        self.every = every
        self.groups: dict[str, list] | None = None

    def on_fit_start(self, trainer, pl_module) -> None:
        self.groups = grad_norm_groups(pl_module, blocks_of(pl_module))

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        step = trainer.global_step
        if step % self.every or self.groups is None:
            return
        log_to_loggers(trainer, to_floats(group_grad_norms(self.groups)), step)
