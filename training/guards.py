"""Guards around any optimizer's step, the spike interventions as their sources define them
(``optim.guards=[skip_step,clip_update]``; none by default):

skip_step     OLMo-core's skip-step rule: the step is not taken when the loss or the gradient
              norm lies more than 6 standard deviations from the mean of the previous 128 steps'
              values (z = |x - mean| / std, std with n - 1; scored once max(20, 128 // 2) values
              are held, the current one included; a skipped step's values join the history).
clip_update   Levanter's update-norm clipping: the step's update before the learning rate (the
              optimizer's direction plus weight decay's wd x theta: the weights' change over
              -lr, per parameter group) is scaled down to mean + 3 std of the previous 128
              unclipped update norms when it is longer (std over the values held, n; from 64
              held values on). Levanter's optax chain clips there, after the decay and before
              the -lr scale, so a learning-rate schedule does not move the history.
zclip         ZClip (Kumar et al. 2025, their code's defaults: z-score mode, adaptive scaling):
              the gradient norm's mean and variance are an EMA (alpha 0.97) started from the first
              25 norms (their mean and population variance); a norm whose z = (g - mean) /
              (std + 1e-6) exceeds 2.5 has its gradients scaled down to mean + 2.5^2 std / z, and
              the EMA then takes the norm it was clipped to (mean first, the variance from the
              new mean). It acts before the optimizer step and before Lightning's own clipping,
              as the authors' Lightning callback does after the backward pass.

The gradient norm skip_step scores is the one before gradient clipping, as OLMo-core reads it:
the training task records it when Lightning calls ``on_before_optimizer_step`` (after AMP's
unscaling and DDP's all-reduce, before ``trainer.gradient_clip_val`` clips), and a step taken
outside Lightning reads the gradients as they are. The guards' histories and counts travel in
the optimizer's state dict, so a resumed run decides as the uninterrupted one would; their
counts reach summary.json (skipped_steps, clipped_updates).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable

import torch

from training.optim import run_closure
from training.probes.spikes import z_score

WINDOW = 128


def global_norm(tensors: list[torch.Tensor]) -> float:
    if not tensors:
        return 0.0
    return float(torch.stack(torch._foreach_norm(tensors, 2)).double().square().sum().sqrt())


def global_mean(value: float) -> float:
    """``value`` averaged over the ranks of the process group (itself, without one): the
    global batch's loss, so every rank scores and skips the same steps under DDP."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t)
    return float(t.item()) / dist.get_world_size()


class SkipStep:
    """OLMo-core's rule: skip the step when the loss or gradient norm is a 6-sigma outlier."""

    sigma = 6.0

    def __init__(self) -> None:
        self.history: dict[str, deque[float]] = {k: deque(maxlen=WINDOW) for k in ("loss", "grad")}
        self.count = 0

    def outlier(self, kind: str, value: float) -> bool:
        history = self.history[kind]
        out = (
            len(history) + 1 >= max(20, WINDOW // 2) and z_score(value, list(history)) > self.sigma
        )
        history.append(value)
        return out

    def skip(self, loss: float, grad_norm: float) -> bool:
        """Whether to skip this step (both values join the history either way)."""
        skipped = self.outlier("loss", loss) | self.outlier("grad", grad_norm)
        self.count += skipped
        return skipped

    def state_dict(self) -> dict:
        return {"history": {k: list(v) for k, v in self.history.items()}, "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        for kind, values in state["history"].items():
            self.history[kind] = deque(values, maxlen=WINDOW)
        self.count = state["count"]


class ClipUpdate:
    """Levanter's rule: scale an update longer than mean + 3 std of the recent ones down to it."""

    sigma = 3.0

    def __init__(self) -> None:
        self.history: deque[float] = deque(maxlen=WINDOW)
        self.count = 0

    def factor(self, norm: float) -> float:
        """The update's scale (1: untouched); ``norm`` joins the history unclipped."""
        scale = 1.0
        if len(self.history) >= max(2, WINDOW // 2):
            limit = statistics.fmean(self.history) + self.sigma * max(
                statistics.pstdev(self.history), 1e-6
            )
            if norm > limit:
                scale = limit / max(norm, 1e-6)
                self.count += 1
        self.history.append(norm)
        return scale

    def state_dict(self) -> dict:
        return {"history": list(self.history), "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.history = deque(state["history"], maxlen=WINDOW)
        self.count = state["count"]


class ZClip:
    """Kumar et al. 2025's adaptive gradient clipping (z-score mode, adaptive scaling)."""

    alpha, z_thresh, warmup, eps = 0.97, 2.5, 25, 1e-6

    def __init__(self) -> None:
        self.buffer: list[float] = []
        self.mean: float | None = None
        self.var = 0.0
        self.count = 0

    def factor(self, norm: float) -> float:
        """The gradients' scale this step (1: untouched)."""
        if self.mean is None:  # warming up: collect, clip nothing
            self.buffer.append(norm)
            if len(self.buffer) >= self.warmup:
                self.mean, self.var = (
                    statistics.fmean(self.buffer),
                    statistics.pvariance(self.buffer),
                )
                self.buffer = []
            return 1.0
        std = self.var**0.5
        z = (norm - self.mean) / (std + self.eps)
        limit = self.mean + self.z_thresh**2 * std / z if z > self.z_thresh else None
        kept = norm if limit is None else limit
        self.mean = self.alpha * self.mean + (1 - self.alpha) * kept
        self.var = self.alpha * self.var + (1 - self.alpha) * (kept - self.mean) ** 2
        if limit is None or norm <= limit:
            return 1.0
        self.count += 1
        return limit / (norm + self.eps)

    def state_dict(self) -> dict:
        return {"buffer": list(self.buffer), "mean": self.mean, "var": self.var,
                "count": self.count}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        self.buffer, self.mean = list(state["buffer"]), state["mean"]
        self.var, self.count = state["var"], state["count"]


GUARDS = {"skip_step": SkipStep, "clip_update": ClipUpdate, "zclip": ZClip}


class Guarded(torch.optim.Optimizer):
    """``inner`` with guards around its step. ``param_groups`` and ``state`` are the inner
    optimizer's (so the scheduler and the probes see them)."""

    def __init__(self, inner: torch.optim.Optimizer, guards: list[str]) -> None:
        params = [p for g in inner.param_groups for p in g["params"]]
        super().__init__(params, {})
        self.inner = inner
        self.param_groups = inner.param_groups
        self.state = inner.state
        self.guards = {name: GUARDS[name]() for name in guards}
        self.grad_norm: float | None = None  # before gradient clipping, when recorded
        self.zclipped = False  # zclip acted on this step's gradients already

    def record_grad_norm(self) -> None:
        """The gradients' global norm now, before Lightning clips them: skip_step scores it,
        and zclip scales the gradients by it here."""
        if "skip_step" in self.guards or "zclip" in self.guards:
            grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
            self.grad_norm = global_norm(grads)
            if (zclip := self.guards.get("zclip")) is not None:
                self.zclipped = True
                if (scale := zclip.factor(self.grad_norm)) < 1.0:
                    torch._foreach_mul_(grads, scale)

    def counts(self) -> dict[str, int]:
        names = {"skip_step": "skipped_steps", "clip_update": "clipped_updates",
                 "zclip": "zclipped_steps"}  # fmt: skip
        return {names[n]: g.count for n, g in self.guards.items()}

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None):
        loss = run_closure(closure)
        params = [p for g in self.param_groups for p in g["params"]]
        if "zclip" in self.guards and not self.zclipped:  # a step outside Lightning
            self.record_grad_norm()
        self.zclipped = False
        skip = self.guards.get("skip_step")
        grad_norm, self.grad_norm = self.grad_norm, None
        if skip is not None and loss is not None:
            if grad_norm is None:  # a step outside Lightning: the gradients as they are
                grad_norm = global_norm([p.grad for p in params if p.grad is not None])
            if skip.skip(global_mean(float(loss)), grad_norm):
                return loss
        clip = self.guards.get("clip_update")
        before = [p.detach().clone() for p in params] if clip is not None else None
        self.inner.step()
        if clip is not None:
            deltas = [p - b for p, b in zip(params, before, strict=True)]
            scale = clip.factor(global_norm(self.before_lr(deltas)))
            if scale < 1.0:
                for p, b, d in zip(params, before, deltas, strict=True):
                    p.copy_(b + d * scale)
        return loss

    def before_lr(self, deltas: list[torch.Tensor]) -> list[torch.Tensor]:
        """Each weight change over -lr of its group: the update before the learning rate (a
        group at lr 0 moved nothing and adds nothing)."""
        lrs = [float(g["lr"]) for g in self.param_groups for _ in g["params"]]
        return [d / -lr for d, lr in zip(deltas, lrs, strict=True) if lr != 0.0]

    def state_dict(self) -> dict:
        guards = {n: g.state_dict() for n, g in self.guards.items()}
        return {"inner": self.inner.state_dict(), "guards": guards}

    def load_state_dict(self, state_dict: dict) -> None:
        self.inner.load_state_dict(state_dict["inner"])
        self.param_groups, self.state = self.inner.param_groups, self.inner.state
        for name, state in state_dict.get("guards", {}).items():
            if name in self.guards:
                self.guards[name].load_state_dict(state)
