"""Stability probes and divergence detection as Lightning callbacks.

They work with any LightningModule whose ``.model`` is a GPT or ViT: a model with ``.blocks``,
each block with ``.attn`` (having ``.qk(x)`` and ``.causal``) and ``.mlp.fc2``, whose forward
returns ``(logits, loss)``.

Step axis (optimizer step, as for ``train/loss``): a value logged at step s describes the weights
theta_s, i.e. after s updates. Gradient norms are those of batch s, read in
``on_before_optimizer_step`` (after AMP unscaling, before clipping); forward probes run at the
start of batch s on a fixed probe batch in eval mode. Probes write to ``trainer.loggers`` at the
steps their own intervals pick (s % every == 0), independent of ``Trainer(log_every_n_steps)``.

    grad_norm/total            L2 norm over all gradients of the LightningModule
    grad_norm/layer_{i}        all parameters of blocks[i]: attention, MLP and its norm slots
    grad_norm/layer_{i}/attn   blocks[i].attn (q, k, v, out projections)
    grad_norm/layer_{i}/mlp    blocks[i].mlp (fc1, fc2)
    grad_norm/last_fc2         blocks[-1].mlp.fc2.weight (Xiong et al. 2020, Thm 1)
    act_norm/layer_{i}         RMS over (batch, position, channel) of the output of blocks[i]
    update/model               model_update_norm(F(x, theta_s), F(x, theta_0))
    attn/max_logit[/layer_{i}] max over batch, heads and allowed (causal) pairs of q.k/sqrt(d_head)
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import lightning.pytorch as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from torch import nn

from training.divergence import Divergence, DivergenceConfig

# ------------------------------------------------------------------ pure-torch measurements


def blocks_of(pl_module: nn.Module) -> Sequence[nn.Module]:
    model = getattr(pl_module, "model", None)
    if model is None or not hasattr(model, "blocks"):
        raise ValueError(
            "probes need pl_module.model to be a GPT or ViT with .blocks; "
            "wrap the model in a task module that stores it as self.model"
        )
    return model.blocks


def grad_norm_groups(module: nn.Module, blocks: Sequence[nn.Module]) -> dict[str, list]:
    """Metric name -> the parameters whose gradients it measures."""
    groups = {"grad_norm/total": list(module.parameters())}
    for i, block in enumerate(blocks):
        groups[f"grad_norm/layer_{i}"] = list(block.parameters())
        groups[f"grad_norm/layer_{i}/attn"] = list(block.attn.parameters())
        groups[f"grad_norm/layer_{i}/mlp"] = list(block.mlp.parameters())
    groups["grad_norm/last_fc2"] = [blocks[-1].mlp.fc2.weight]
    return groups


def group_grad_norms(groups: dict[str, list]) -> dict[str, torch.Tensor]:
    """L2 norm of each group's gradients (absent gradients count as 0), as 0-d tensors.

    One fused per-tensor norm pass, then squared norms summed per group with one index_add.
    """
    params, seen = [], set()
    for group in groups.values():
        for p in group:
            if p.grad is not None and id(p) not in seen:
                seen.add(id(p))
                params.append(p)
    if not params:
        return {name: torch.zeros(()) for name in groups}
    device = params[0].grad.device
    # float64 so squared norms of exploding gradients stay finite (MPS has no float64)
    acc = torch.float32 if device.type == "mps" else torch.float64
    norms = torch._foreach_norm([p.grad for p in params], 2, dtype=torch.float32)
    squares = torch.stack(norms).to(acc).square()
    where = {id(p): i for i, p in enumerate(params)}
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


def model_update_norm(logits: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """DeepNet's ||F(x, theta_t) - F(x, theta_0)||, made independent of the probe batch size:

        sqrt( sum (logits - ref)^2 / P ),   P = logits.numel() / logits.shape[-1]

    i.e. the root-mean-square over the P positions (B*T for the GPT, B for the ViT) of the L2 norm
    of each position's logit difference.
    """
    positions = logits.numel() // logits.shape[-1]
    return ((logits.float() - ref.float()).square().sum() / positions).sqrt()


def max_attn_logit(attn: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Max of q.k/sqrt(d_head) over batch, heads and query-key pairs; causal attention counts
    only keys j <= query i, the pairs its softmax sees."""
    q, k = attn.qk(x)  # (B, nh, T, hs) each
    scores = q.float() @ k.float().transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, nh, T, T)
    if attn.causal:
        T = scores.size(-1)
        future = torch.ones(T, T, dtype=torch.bool, device=scores.device).triu(1)  # (T, T)
        scores = scores.masked_fill(future, float("-inf"))
    return scores.amax()


class ForwardMeasure:
    """One quantity read during a no-grad forward pass over the probe batch."""

    def attach(self, blocks: Sequence[nn.Module]) -> list:
        """Register hooks; returns their handles (removed after the pass)."""
        return []

    def read(self, logits: torch.Tensor, step: int) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class ActNorm(ForwardMeasure):
    """Residual-stream RMS after each block."""

    def attach(self, blocks):
        self.rms: dict[int, torch.Tensor] = {}

        def hook(i: int):
            def fn(module, inputs, output):
                self.rms[i] = output.float().square().mean().sqrt()

            return fn

        return [block.register_forward_hook(hook(i)) for i, block in enumerate(blocks)]

    def read(self, logits, step):
        return {f"act_norm/layer_{i}": v for i, v in sorted(self.rms.items())}


class MaxAttnLogit(ForwardMeasure):
    """Largest attention logit per layer, from the input the attention module receives."""

    def attach(self, blocks):
        self.per_layer: dict[int, torch.Tensor] = {}

        def hook(i: int):
            def fn(module, args):
                self.per_layer[i] = max_attn_logit(module, args[0])

            return fn

        return [b.attn.register_forward_pre_hook(hook(i)) for i, b in enumerate(blocks)]

    def read(self, logits, step):
        out = {f"attn/max_logit/layer_{i}": v for i, v in sorted(self.per_layer.items())}
        out["attn/max_logit"] = torch.stack(list(self.per_layer.values())).amax()
        return out


class ModelUpdate(ForwardMeasure):
    """Distance of the probe-batch logits from those at step 0 (only those logits are kept)."""

    def __init__(self) -> None:
        self.ref: torch.Tensor | None = None
        self.warned = False

    def read(self, logits, step):
        if self.ref is None:
            if step != 0:
                if not self.warned:
                    rank_zero_warn(f"update/model needs the step-0 logits; not logged from {step}")
                    self.warned = True
                return {}
            self.ref = logits.detach().float().clone()
        return {"update/model": model_update_norm(logits, self.ref.to(logits.device))}

    def state_dict(self):
        return {"ref": None if self.ref is None else self.ref.cpu()}

    def load_state_dict(self, state):
        self.ref = state.get("ref")


@torch.no_grad()
def run_forward_probes(
    model: nn.Module,
    inputs: torch.Tensor,
    measures: Sequence[ForwardMeasure],
    step: int,
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> dict[str, float]:
    """One eval-mode forward of ``inputs`` with the measures' hooks; restores the train mode."""
    handles = [h for m in measures for h in m.attach(model.blocks)]
    was_training = model.training
    model.eval()  # dropout off: the probe reads the function, not a noisy sample of it
    try:
        with context():
            out = model(inputs)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    logits = (out[0] if isinstance(out, tuple) else out).float()
    values: dict[str, torch.Tensor] = {}
    for m in measures:
        values.update(m.read(logits, step))
    if not values:
        return {}
    floats = torch.stack([v.reshape(()).float() for v in values.values()]).tolist()  # one sync
    return dict(zip(values, floats, strict=True))


# ------------------------------------------------------------------ configuration


@dataclass(frozen=True)
class ProbeSpec:
    every: int  # default interval in optimizer steps
    measure: type[ForwardMeasure] | None  # None: read from gradients, not a forward pass
    doc: str


PROBES: dict[str, ProbeSpec] = {
    "grad_norm": ProbeSpec(1, None, "grad_norm/total, /layer_{i}[/attn|/mlp], /last_fc2"),
    "act_norm": ProbeSpec(10, ActNorm, "act_norm/layer_{i}"),
    "update": ProbeSpec(10, ModelUpdate, "update/model"),
    "max_logit": ProbeSpec(10, MaxAttnLogit, "attn/max_logit[/layer_{i}]"),
}


@dataclass
class ProbeConfig:
    """Which probes run and how often. ``every`` overrides PROBES' default intervals by name."""

    enabled: list[str] = field(default_factory=lambda: list(PROBES))
    every: dict[str, int] = field(default_factory=dict)
    batch_size: int = 8  # samples in the fixed probe batch

    def __post_init__(self) -> None:
        self.enabled, self.every = list(self.enabled), dict(self.every)
        unknown = sorted({n for n in (*self.enabled, *self.every) if n not in PROBES})
        if unknown:
            raise ValueError(f"unknown probe(s) {unknown}; choose from: {', '.join(PROBES)}")
        bad = {n: k for n, k in self.every.items() if not isinstance(k, int) or k < 1}
        if bad:
            raise ValueError(f"probe intervals must be integers >= 1, got {bad}")
        if self.batch_size < 1:
            raise ValueError(f"probes.batch_size must be >= 1, got {self.batch_size}")

    def interval(self, name: str) -> int:
        return self.every.get(name, PROBES[name].every)


# ------------------------------------------------------------------ callbacks


def log_to_loggers(trainer: L.Trainer, metrics: dict[str, float], step: int) -> None:
    if metrics and trainer.is_global_zero:
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)


class GradNormProbe(Callback):
    """grad_norm/* every ``every`` optimizer steps, before clipping and after AMP unscaling."""

    def __init__(self, every: int = PROBES["grad_norm"].every) -> None:
        self.every = every
        self.groups: dict[str, list] | None = None

    def on_fit_start(self, trainer, pl_module) -> None:
        self.groups = grad_norm_groups(pl_module, blocks_of(pl_module))

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        step = trainer.global_step
        if step % self.every or self.groups is None:
            return
        norms = group_grad_norms(self.groups)
        floats = torch.stack([v.reshape(()).float() for v in norms.values()]).tolist()
        log_to_loggers(trainer, dict(zip(norms, floats, strict=True)), step)


class ForwardProbes(Callback):
    """act_norm, update and max_logit on one fixed probe batch, each at its own interval.

    The probe batch is ``probe_batch`` if given, else the first ``batch_size`` inputs of the first
    batch of the datamodule's val loader (then the trainer's val, then train loader). It and the
    step-0 logits are saved in checkpoints, so a resumed run keeps measuring the same thing.
    """

    def __init__(
        self,
        every: dict[str, int],
        batch_size: int = 8,
        probe_batch: torch.Tensor | tuple | None = None,
    ) -> None:
        unknown = [n for n in every if n not in PROBES or PROBES[n].measure is None]
        if unknown:
            raise ValueError(f"not forward probes: {unknown}")
        self.every = dict(every)
        self.measures = {name: PROBES[name].measure() for name in every}
        self.batch_size = batch_size
        self.inputs = None if probe_batch is None else self._inputs_of(probe_batch)
        self._last_step = -1

    def _inputs_of(self, batch) -> torch.Tensor:
        inputs = batch[0] if isinstance(batch, tuple | list) else batch
        return inputs[: self.batch_size].detach().cpu()

    def _first_batch(self, trainer):
        datamodule = getattr(trainer, "datamodule", None)
        sources = [
            datamodule.val_dataloader if datamodule is not None else None,
            lambda: trainer.val_dataloaders,
            lambda: trainer.train_dataloader,
        ]
        error: Exception | None = None
        for source in sources:
            try:
                loader = source() if source is not None else None
                if isinstance(loader, list | tuple):
                    loader = loader[0] if loader else None
                if isinstance(loader, dict):
                    loader = next(iter(loader.values()), None)
                if loader is not None:
                    return next(iter(loader))
            except Exception as e:  # e.g. a datamodule without val_dataloader: try the next
                error = e
        raise ValueError(
            "forward probes found no batch; pass probe_batch=... to ForwardProbes "
            "or give the trainer a val dataloader"
        ) from error

    def on_train_start(self, trainer, pl_module) -> None:
        blocks_of(pl_module)  # fail at the start, not at the first probe step
        if self.inputs is None:
            self.inputs = self._inputs_of(self._first_batch(trainer))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        if step == self._last_step:  # gradient accumulation: once per optimizer step
            return
        self._last_step = step
        due = [m for name, m in self.measures.items() if step % self.every[name] == 0]
        if not due:
            return
        inputs = trainer.precision_plugin.convert_input(self.inputs.to(pl_module.device))
        metrics = run_forward_probes(
            pl_module.model, inputs, due, step, trainer.precision_plugin.forward_context
        )
        log_to_loggers(trainer, metrics, step)

    def state_dict(self) -> dict:
        return {
            "inputs": self.inputs,
            "measures": {name: m.state_dict() for name, m in self.measures.items()},
        }

    def load_state_dict(self, state_dict: dict) -> None:
        self.inputs = state_dict.get("inputs", self.inputs)
        for name, state in state_dict.get("measures", {}).items():
            if name in self.measures:
                self.measures[name].load_state_dict(state)


def build_callbacks(
    probes: ProbeConfig | None = None,
    divergence: DivergenceConfig | None = None,
    probe_batch: torch.Tensor | tuple | None = None,
) -> list[Callback]:
    """The probe callbacks for ``probes.enabled``, then Divergence (it may clear gradients, so it
    runs after the gradient probe has read them)."""
    probes = probes or ProbeConfig()
    callbacks: list[Callback] = []
    if "grad_norm" in probes.enabled:
        callbacks.append(GradNormProbe(probes.interval("grad_norm")))
    forward = {n: probes.interval(n) for n in probes.enabled if PROBES[n].measure is not None}
    if forward:
        callbacks.append(ForwardProbes(forward, probes.batch_size, probe_batch))
    callbacks.append(Divergence(divergence))
    return callbacks
