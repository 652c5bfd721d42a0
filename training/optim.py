"""The optimizer side of a run: the optimizers (its config and the learning-rate schedule are
torch-free, in training/optim_config.py).

``OPTIMIZERS`` maps ``optim.name`` to a builder ``(model, OptimConfig) -> Optimizer``; every
optimizer shares the schedule keys (linear warmup, then ``SCHEDULES``) and ``param_groups``'
weight-decay split. Muon orthogonalizes the updates of the Blocks' matrices and leaves the
embeddings, head, biases and gains to AdamW (``Combined`` steps both as one optimizer, so the
LR schedule, gradient clipping and checkpoints see one).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, MutableMapping

import torch
from torch import nn

from models.param import FIXED, Scales
from training.optim_config import (
    OptimConfig,
)


def z_loss_term(logits: torch.Tensor, coefficient: float) -> torch.Tensor:
    """PaLM's auxiliary z-loss (Chowdhery et al. 2022; Wortsman et al. 2023):

        coefficient * mean over positions of (log Z)^2,   log Z = logsumexp_v(logits_v)

    It pulls the softmax's log partition function towards 0, so the output logits cannot drift.
    """
    return coefficient * logits.float().logsumexp(dim=-1).square().mean()


def run_closure(closure: Callable[[], torch.Tensor] | None) -> torch.Tensor | None:
    """The closure's loss (forward and backward), with gradients on: an optimizer's step runs
    under no_grad."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


# Each parameter's role, by its name: the input embeddings (token and position tables, ViT's
# patch embedding and class token), the readout (lm_head, the ViT's head) and every other one.
ROLES = {
    "emb": ("tok_emb.", "pos_emb", "patch_embed.", "cls_token"),
    "readout": ("lm_head.", "head."),
}


UNSCALED = Scales(FIXED, in_blocks=False)  # a parameter no parametrization scales


def role_of(name: str) -> str:
    return next((r for r, starts in ROLES.items() if name.startswith(starts)), "hidden")


def param_groups(model: nn.Module, cfg: OptimConfig, adam_eps: bool = False) -> list[dict]:
    """Decay matrices and embeddings (>=2-D) by ``cfg.decay_per_lr``; leave biases and norm
    gains (1-D) alone. Under muP or CompleteP (``model.param_scales``, models/param.py), or with
    an lr multiplier by role (``optim.emb_lr_mult`` and its siblings), each of the two is split
    by its parameters' multipliers: the group's lr (the schedule's LambdaLR multiplies it), its
    weight decay and, for an Adam-type optimizer (``adam_eps``), its eps; ``lr_scale`` records
    the lr multiplier."""
    params = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    decay = [(n, p) for n, p in params if p.ndim >= 2]  # tied weights appear once
    no_decay = [(n, p) for n, p in params if p.ndim < 2]
    scales = getattr(model, "param_scales", None) or {}
    mults = cfg.lr_mults
    tied = getattr(getattr(model, "cfg", None), "tie_weights", False)
    if tied and "lm_head.weight" not in dict(params) and mults["emb"] != mults["readout"]:
        raise ValueError(
            "optim.emb_lr_mult and optim.readout_lr_mult differ, and the readout is the token "
            "embedding (model.tie_weights=true): set model.tie_weights=false, or one multiplier"
        )
    if all(s.lr == s.weight_decay == s.eps == 1.0 for s in scales.values()) and set(
        mults.values()
    ) == {1.0}:
        return [
            {"params": [p for _, p in decay], "weight_decay": cfg.decay_per_lr},
            {"params": [p for _, p in no_decay], "weight_decay": 0.0},
        ]
    groups: dict[tuple, dict] = {}
    for decays, members in ((True, decay), (False, no_decay)):
        for name, p in members:
            s = scales.get(name) or UNSCALED
            mult = mults[role_of(name)]
            key = (decays, s.lr, mult, s.weight_decay, s.eps)
            if key not in groups:
                groups[key] = {
                    "params": [],
                    "lr": cfg.lr * s.lr * mult,
                    "lr_scale": s.lr * mult,
                    "lr_mult": mult,  # the role's multiplier alone (Muon's AdamW half reads it)
                    "weight_decay": cfg.decay_per_lr * s.weight_decay if decays else 0.0,
                }
                if adam_eps:
                    groups[key]["eps"] = cfg.eps * s.eps
            groups[key]["params"].append(p)
    return list(groups.values())


def adamw(groups: list[dict], cfg: OptimConfig) -> torch.optim.Optimizer:
    """torch's AdamW over ``groups``; its fused implementation as ``cfg.fused`` says (None: when
    every parameter is on a GPU)."""
    params = [p for g in groups for p in g["params"]]
    fused = cfg.fused
    if fused is None:
        fused = True if params and all(p.is_cuda for p in params) else None
    elif not fused:
        fused = None  # torch's default step (foreach where it can)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, fused=fused)


def build_adamw(model: nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    """AdamW with ``param_groups``' decay split (Loshchilov & Hutter 2019)."""
    return adamw(param_groups(model, cfg, adam_eps=True), cfg)


def build_sgd(model: nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    """SGD with (heavy-ball or Nesterov) momentum; its weight decay is torch's: an L2 term in
    the gradient, so it passes through the momentum."""
    groups = param_groups(model, cfg)
    return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov)


def build_adafactor(model: nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    """Adafactor (Shazeer & Stern 2018) as torch implements it: factored second moments, no
    first moment, relative step off (the schedule gives the lr); weight decay lr x wd."""
    return torch.optim.Adafactor(param_groups(model, cfg), lr=cfg.lr)


class AdamAtan2(torch.optim.Optimizer):
    """Adam-atan2 (Everett et al. 2024): Adam's step with the division by sqrt(v_hat) + eps
    replaced by an arctangent, so no eps is needed and the step is bounded:

        theta <- theta (1 - lr wd) - lr a atan2(m_hat, b sqrt(v_hat))

    m_hat, v_hat Adam's bias-corrected moments. b = 1, and a = 4 / pi, which makes the first
    step (|m_hat| = sqrt(v_hat)) as long as Adam's; weight decay decoupled as AdamW's. The state
    keeps Adam's names (step, exp_avg, exp_avg_sq), so the adam_state probe reads it.
    """

    def __init__(self, params, lr: float, betas=(0.9, 0.95), weight_decay: float = 0.0) -> None:
        defaults = dict(
            lr=lr, betas=betas, weight_decay=weight_decay, atan2_a=4 / math.pi, atan2_b=1.0
        )
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None):
        loss = run_closure(closure)
        for group in self.param_groups:
            (b1, b2), lr = group["betas"], group["lr"]
            for p in (p for p in group["params"] if p.grad is not None):
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros(())
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                t = float(state["step"])
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.lerp_(p.grad, 1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                p.mul_(1 - lr * group["weight_decay"])
                direction = torch.atan2(
                    m / (1 - b1**t), group["atan2_b"] * (v / (1 - b2**t)).sqrt()
                )
                p.add_(direction, alpha=-lr * group["atan2_a"])
        return loss


def build_adam_atan2(model: nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    """Adam-atan2 with ``param_groups``' decay split."""
    return AdamAtan2(param_groups(model, cfg), lr=cfg.lr, betas=cfg.betas)


def hidden_matrices(model: nn.Module) -> list[nn.Parameter]:
    """The 2-D weights inside the Blocks (attention and MLP projections): what Muon updates.
    Embeddings, the head (tied or not), patch embedding, biases, gains and weight norm's
    (out, 1) magnitudes are not among them."""
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        raise ValueError(f"optim=muon needs a model with Blocks; {type(model).__name__} has none")
    # true matrices only: weight norm's magnitudes g are (out, 1), a vector Muon must not
    # orthogonalize (it would set every g to the same value)
    return [p for p in blocks.parameters() if p.requires_grad and p.ndim == 2 and min(p.shape) > 1]


def build_muon(model: nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    """Muon (Jordan et al. 2024; torch.optim.Muon) on the Blocks' matrices, AdamW on the rest.

    The update is lr scaled as Liu et al. 2025 ("Muon is scalable", ``match_rms_adamw``: 0.2 x
    sqrt(max(rows, cols))) so one ``optim.lr`` and ``optim.weight_decay`` serve both halves,
    and Muon's decoupled decay is lr x weight_decay as AdamW's.
    """
    if not hasattr(torch.optim, "Muon"):
        raise RuntimeError(
            f"optim=muon needs torch >= 2.9 (torch.optim.Muon); this is {torch.__version__}"
        )
    matrices = hidden_matrices(model)
    chosen = {id(p) for p in matrices}
    rest = [  # muP's per-parameter lr stays out of Muon's AdamW half; the roles' multipliers in
        {
            "params": [p for p in g["params"] if id(p) not in chosen],
            "weight_decay": g["weight_decay"],
            **({"lr": cfg.lr * g["lr_mult"]} if g.get("lr_mult", 1.0) != 1.0 else {}),
        }
        for g in param_groups(model, cfg)
    ]
    muon = torch.optim.Muon(
        matrices,
        lr=cfg.lr * cfg.lr_mults["hidden"],  # the Blocks' matrices are hidden
        weight_decay=cfg.decay_per_lr,
        momentum=cfg.momentum,
        nesterov=cfg.nesterov,
        adjust_lr_fn="match_rms_adamw",
    )
    return Combined([muon, adamw(rest, cfg)])


class States(MutableMapping):
    """The per-parameter state of several optimizers as one mapping; a write goes to the
    optimizer that holds the parameter (Lightning moves states between devices this way)."""

    def __init__(self, parts: list[torch.optim.Optimizer]) -> None:
        self.parts = parts

    def owner(self, param: torch.Tensor) -> torch.optim.Optimizer:
        for opt in self.parts:
            if any(p is param for g in opt.param_groups for p in g["params"]):
                return opt
        raise KeyError(param)

    def __getitem__(self, param):
        return self.owner(param).state[param]

    def __setitem__(self, param, value) -> None:
        self.owner(param).state[param] = value

    def __delitem__(self, param) -> None:
        del self.owner(param).state[param]

    def __iter__(self) -> Iterator:
        return (p for opt in self.parts for p in opt.state)

    def __len__(self) -> int:
        return sum(len(opt.state) for opt in self.parts)


class Combined(torch.optim.Optimizer):
    """Optimizers over disjoint parameters, stepped as one: ``param_groups`` are theirs (so a
    scheduler's lr reaches them), ``step`` evaluates the closure once, and the state dict holds
    each one's."""

    def __init__(self, parts: list[torch.optim.Optimizer]) -> None:
        params = [p for opt in parts for g in opt.param_groups for p in g["params"]]
        super().__init__(params, {})
        self.parts = parts
        self.param_groups = [g for opt in parts for g in opt.param_groups]
        self.state = States(parts)

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None):
        loss = run_closure(closure)
        for opt in self.parts:
            opt.step()
        return loss

    def state_dict(self) -> dict:
        return {"parts": [opt.state_dict() for opt in self.parts]}

    def load_state_dict(self, state_dict: dict) -> None:
        for opt, state in zip(self.parts, state_dict["parts"], strict=True):
            opt.load_state_dict(state)
        self.param_groups = [g for opt in self.parts for g in opt.param_groups]


# What stability studies compare (Wortsman et al. 2023 vary AdamW's eps and betas, which stay
# optim.eps and optim.betas). Lion is not in torch.
OPTIMIZERS: dict[str, Callable[[nn.Module, OptimConfig], torch.optim.Optimizer]] = {
    "adamw": build_adamw,
    "sgd": build_sgd,
    "adafactor": build_adafactor,
    "muon": build_muon,
    "adam_atan2": build_adam_atan2,
}
