"""Guards around any optimizer's step, the spike interventions as their sources define them
(``optim.guards=[skip_step,clip_update]``; none by default):

skip_step     OLMo-core's skip-step rule: the step is not taken when the loss or the gradient
              norm lies more than 6 standard deviations from the mean of the previous 128 steps'
              values (z = |x - mean| / std, std with n - 1; scored once max(20, 128 // 2) values
              are held, the current one included; a skipped step's values join the history).
clip_update   Levanter's update-norm clipping: the step's whole update (the weights' change, lr
              and weight decay included) is scaled down to mean + 3 std of the previous 128
              unclipped update norms when it is longer (std over the values held, n; from 64
              held values on).

The gradient norm is the one the optimizer sees (after gradient clipping, when that is on). The
guards' histories and counts travel in the optimizer's state dict, so a resumed run decides as
the uninterrupted one would; their counts reach summary.json (skipped_steps, clipped_updates).
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


GUARDS = {"skip_step": SkipStep, "clip_update": ClipUpdate}


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

    def counts(self) -> dict[str, int]:
        names = {"skip_step": "skipped_steps", "clip_update": "clipped_updates"}
        return {names[n]: g.count for n, g in self.guards.items()}

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None):
        loss = run_closure(closure)
        params = [p for g in self.param_groups for p in g["params"]]
        skip = self.guards.get("skip_step")
        if skip is not None and loss is not None:
            grads = [p.grad for p in params if p.grad is not None]  # all-reduced under DDP
            if skip.skip(global_mean(float(loss)), global_norm(grads)):
                return loss
        clip = self.guards.get("clip_update")
        before = [p.detach().clone() for p in params] if clip is not None else None
        self.inner.step()
        if clip is not None:
            deltas = [p - b for p, b in zip(params, before, strict=True)]
            scale = clip.factor(global_norm(deltas))
            if scale < 1.0:
                for p, b, d in zip(params, before, deltas, strict=True):
                    p.copy_(b + d * scale)
        return loss

    def state_dict(self) -> dict:
        guards = {n: g.state_dict() for n, g in self.guards.items()}
        return {"inner": self.inner.state_dict(), "guards": guards}

    def load_state_dict(self, state_dict: dict) -> None:
        self.inner.load_state_dict(state_dict["inner"])
        self.param_groups, self.state = self.inner.param_groups, self.inner.state
        for name, state in state_dict.get("guards", {}).items():
            if name in self.guards:
                self.guards[name].load_state_dict(state)
