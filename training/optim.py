"""The optimizer side of a run: its config, the learning-rate schedule and the optimizers.

``OPTIMIZERS`` maps ``optim.name`` to a builder ``(model, OptimConfig) -> Optimizer``; every
optimizer shares the schedule keys (linear warmup, then ``SCHEDULES``) and ``param_groups``'
weight-decay split. Muon orthogonalizes the updates of the Blocks' matrices and leaves the
embeddings, head, biases and gains to AdamW (``Combined`` steps both as one optimizer, so the
LR schedule, gradient clipping and checkpoints see one).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass

import torch
from torch import nn


def cosine_multiplier(progress: float, min_lr_ratio: float) -> float:
    """Half a cosine from 1 down to ``min_lr_ratio`` as progress goes 0 -> 1."""
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def constant_multiplier(progress: float, min_lr_ratio: float) -> float:
    return 1.0


WSD_DECAY = 0.2  # the share of the post-warmup steps that wsd spends decaying


def wsd_multiplier(progress: float, min_lr_ratio: float) -> float:
    """Warmup-stable-decay (Hu et al. 2024, MiniCPM): 1 until the last WSD_DECAY of the run,
    then a straight line down to ``min_lr_ratio`` at progress 1."""
    start = 1.0 - WSD_DECAY
    if progress <= start:
        return 1.0
    return 1.0 - (1.0 - min_lr_ratio) * (progress - start) / WSD_DECAY


# Schedule after warmup: (progress in [0, 1], min_lr_ratio) -> lr multiplier.
SCHEDULES: dict[str, Callable[[float, float], float]] = {
    "cosine": cosine_multiplier,
    "constant": constant_multiplier,
    "wsd": wsd_multiplier,
}


@dataclass
class OptimConfig:
    name: str = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    warmup_steps: int = 0
    schedule: str = "cosine"
    min_lr_ratio: float = 0.1
    strict_warmup: bool = False  # refuse (not clamp) a warmup longer than the run
    z_loss: float = 0.0  # coefficient of mean(log Z^2) added to the loss (z_loss_term)
    # Wortsman et al. 2023's independent weight decay: each step shrinks the weights by
    # weight_decay x the schedule's multiplier, not x the lr (torch's AdamW: lr x weight_decay).
    independent_wd: bool = False
    momentum: float = 0.9  # sgd, muon
    nesterov: bool = False  # sgd, muon
    # AdamW's (and Muon's AdamW half's) fused step: None, on a GPU only (the CPU takes torch's
    # foreach step); true, on the CPU too (about 3x faster a step at the findings' sizes, the
    # results move in the last digits: an opt-in, docs/benchmarks.md); false, never.
    fused: bool | None = None

    def read(self) -> dict:
        """The settings this config's optimizer reads (what a run records as its optim)."""
        keys = (*SCHEDULE_KEYS, *OPTIMIZER_KEYS.get(self.name, ()))
        return {k: v for k, v in dataclasses.asdict(self).items() if k in keys}

    @property
    def decay_per_lr(self) -> float:
        """The weight_decay torch's AdamW gets: it multiplies it by the step's lr."""
        return self.weight_decay / self.lr if self.independent_wd else self.weight_decay

    def __post_init__(self) -> None:
        self.betas = tuple(float(b) for b in self.betas)  # a YAML list arrives as a list
        if self.name not in OPTIMIZERS:
            raise ValueError(
                f"unknown optimizer '{self.name}'; choose one of: {', '.join(OPTIMIZERS)}"
            )
        if self.schedule not in SCHEDULES:
            raise ValueError(
                f"unknown optim.schedule '{self.schedule}'; choose one of: {', '.join(SCHEDULES)}"
            )
        if not self.z_loss >= 0.0:
            raise ValueError(f"optim.z_loss must be >= 0 (0 turns it off), got {self.z_loss}")
        numbers = {"lr": self.lr, "weight_decay": self.weight_decay, "eps": self.eps,
                   "betas": self.betas, "min_lr_ratio": self.min_lr_ratio,
                   "momentum": self.momentum}  # fmt: skip
        for key, value in numbers.items():
            if not all(math.isfinite(v) for v in (value if key == "betas" else (value,))):
                raise ValueError(f"optim.{key} must be a finite number, got {value}")
        ranges = (
            ("weight_decay", self.weight_decay >= 0.0, ">= 0"),
            ("eps", self.eps > 0.0, "> 0"),
            ("betas", all(0.0 <= b < 1.0 for b in self.betas) and len(self.betas) == 2,
             "two values in [0, 1)"),
            ("momentum", 0.0 <= self.momentum < 1.0, "in [0, 1)"),
        )  # fmt: skip
        for key, ok, rule in ranges:
            if not ok and key in (*SCHEDULE_KEYS, *OPTIMIZER_KEYS.get(self.name, ())):
                raise ValueError(f"optim.{key} must be {rule}, got {getattr(self, key)}")
        if self.lr <= 0 or self.warmup_steps < 0 or not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(
                f"optim needs lr > 0, warmup_steps >= 0 and 0 <= min_lr_ratio <= 1; got "
                f"lr={self.lr}, warmup_steps={self.warmup_steps}, min_lr_ratio={self.min_lr_ratio}"
            )


def lr_multiplier(step: int, cfg: OptimConfig, total_steps: int) -> float:
    """LR multiplier at optimizer step ``step`` (0-based).

    Warmup: (step + 1) / warmup_steps for step < warmup_steps, so the first step already moves.
    Then the schedule at progress (step - warmup_steps) / (total_steps - warmup_steps), clamped.
    """
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps)
    return SCHEDULES[cfg.schedule](min(1.0, max(0.0, progress)), cfg.min_lr_ratio)


def z_loss_term(logits: torch.Tensor, coefficient: float) -> torch.Tensor:
    """PaLM's auxiliary z-loss (Chowdhery et al. 2022; Wortsman et al. 2023):

        coefficient * mean over positions of (log Z)^2,   log Z = logsumexp_v(logits_v)

    It pulls the softmax's log partition function towards 0, so the output logits cannot drift.
    """
    return coefficient * logits.float().logsumexp(dim=-1).square().mean()


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Decay matrices and embeddings (>=2-D); leave biases and norm gains (1-D) alone."""
    params = [p for p in model.parameters() if p.requires_grad]  # tied weights appear once
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


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
    return adamw(param_groups(model, cfg.decay_per_lr), cfg)


def build_sgd(model: nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    """SGD with (heavy-ball or Nesterov) momentum; its weight decay is torch's: an L2 term in
    the gradient, so it passes through the momentum."""
    groups = param_groups(model, cfg.decay_per_lr)
    return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov)


def build_adafactor(model: nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    """Adafactor (Shazeer & Stern 2018) as torch implements it: factored second moments, no
    first moment, relative step off (the schedule gives the lr); weight decay lr x wd."""
    return torch.optim.Adafactor(param_groups(model, cfg.decay_per_lr), lr=cfg.lr)


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
    rest = [
        {
            "params": [p for p in g["params"] if id(p) not in chosen],
            "weight_decay": g["weight_decay"],
        }
        for g in param_groups(model, cfg.decay_per_lr)
    ]
    muon = torch.optim.Muon(
        matrices,
        lr=cfg.lr,
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
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for opt in self.parts:
            opt.step()
        return loss

    def state_dict(self) -> dict:
        return {"parts": [opt.state_dict() for opt in self.parts]}

    def load_state_dict(self, state_dict: dict) -> None:
        for opt, state in zip(self.parts, state_dict["parts"], strict=True):
            opt.load_state_dict(state)
        self.param_groups = [g for opt in self.parts for g in opt.param_groups]


# The keys every optimizer reads (the schedule, decay and loss settings), and each optimizer's
# own: a key the chosen optimizer does not read is refused before training (training/config.py
# optim_config), never recorded as if it changed something.
SCHEDULE_KEYS = (
    "name", "lr", "weight_decay", "warmup_steps", "schedule", "min_lr_ratio", "strict_warmup",
    "z_loss", "independent_wd",
)  # fmt: skip
OPTIMIZER_KEYS: dict[str, tuple[str, ...]] = {
    "adamw": ("betas", "eps", "fused"),
    "sgd": ("momentum", "nesterov"),
    "adafactor": (),  # torch's defaults for its decay rate and eps
    "muon": ("momentum", "nesterov", "betas", "eps", "fused"),  # betas, eps, fused: its AdamW half
}
# What stability studies compare (Wortsman et al. 2023 vary AdamW's eps and betas, which stay
# optim.eps and optim.betas). Lion is not in torch.
OPTIMIZERS: dict[str, Callable[[nn.Module, OptimConfig], torch.optim.Optimizer]] = {
    "adamw": build_adamw,
    "sgd": build_sgd,
    "adafactor": build_adafactor,
    "muon": build_muon,
}
