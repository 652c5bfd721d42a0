"""sharpness/*: the top eigenvalue of the loss Hessian on the probe batch, and Adam's version.

    sharpness/hessian          lambda_max(H),  H = d^2 L / d theta^2 at theta_s on the probe batch
    sharpness/preconditioned   lambda_max(P^-1 H),  P = (1 - beta1^t) diag(sqrt(v_t / (1 - beta2^t))
                               + eps), from AdamW's second moments v_t after t steps (Cohen et al.
                               2022; logged once the optimizer holds them, i.e. from step 1)

Edge of stability: gradient descent with step size lr drives lambda_max(H) up to about 2/lr
(Cohen et al. 2021); Adam drives lambda_max(P^-1 H) to about (2 + 2 beta1) / ((1 - beta1) lr) =
38/lr at beta1 = 0.9 (Cohen et al. 2022).

Power iteration: v <- A v / ||A v||, lambda = v . A v (the Rayleigh quotient of a unit v), ``iters``
times from a random unit v drawn from a private generator seeded by the step (the training's
random streams stay untouched). For A = H, A v is a Hessian-vector product: the gradient of g . v,
g = dL/dtheta kept with its graph. P^-1 H has the eigenvalues of the symmetric P^-1/2 H P^-1/2,
which is iterated instead. Power iteration finds the eigenvalue of largest |lambda|; when that one
is negative, a second run on A - lambda I finds the top one. The loss is the model's own (the
cross-entropy) in eval mode and float32; attention takes SDPA's math kernel and RMSNorm the plain
op, the only ones with second derivatives. Gradients in .grad stay untouched (autograd.grad).

Each Rayleigh quotient is a lower bound of lambda_max; how close ``iters`` steps get depends on
the gap to the next eigenvalue. The shifted run is the slow case: its ratio is
(lambda_2 - lambda_min) / (lambda_max - lambda_min), so when a large negative eigenvalue
dominates, 20 steps can read far below lambda_max (raise ``probes.sharpness.iters``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from models.kernels import unfused
from training.probes.common import Every, log_to_loggers, to_floats
from training.probes.forward import ProbeBatchCallback

MatVec = Callable[[torch.Tensor], torch.Tensor]


def power_iteration(matvec: MatVec, v: torch.Tensor, iters: int) -> torch.Tensor:
    """The Rayleigh quotient after ``iters`` steps of power iteration from ``v``."""
    v = v / v.norm()
    lam = torch.zeros((), dtype=torch.float64, device=v.device)
    for _ in range(iters):
        w = matvec(v)
        lam = torch.dot(v.double(), w.double())
        norm = w.norm()
        if not bool(torch.isfinite(norm)) or float(norm) == 0.0:
            break
        v = w / norm
    return lam


def top_eigenvalue(matvec: MatVec, start: torch.Tensor, iters: int) -> torch.Tensor:
    """lambda_max of the symmetric operator ``matvec`` (see the module docstring)."""
    lam = power_iteration(matvec, start, iters)
    if lam < 0:  # the dominant eigenvalue is the most negative one: shift it to 0
        shift = float(lam)
        lam = shift + power_iteration(lambda v: matvec(v) - shift * v, start, iters)
    return lam


class HessianVector:
    """v -> H v for the loss of ``model`` on (inputs, targets), over its trainable parameters."""

    def __init__(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        was_training = model.training
        model.eval()
        try:
            with sdpa_kernel(SDPBackend.MATH), unfused(), torch.enable_grad():
                with torch.compiler.set_stance("force_eager"):
                    _, loss = model(inputs, targets)
                grads = torch.autograd.grad(loss.float(), self.params, create_graph=True)
        finally:
            model.train(was_training)
        self.grads = grads
        self.loss = loss.detach()

    @property
    def dim(self) -> int:
        return sum(p.numel() for p in self.params)

    def split(self, v: torch.Tensor) -> list[torch.Tensor]:
        return [
            c.view_as(p)
            for c, p in zip(v.split([p.numel() for p in self.params]), self.params, strict=True)
        ]

    def __call__(self, v: torch.Tensor) -> torch.Tensor:
        with sdpa_kernel(SDPBackend.MATH), unfused():
            hv = torch.autograd.grad(
                self.grads, self.params, self.split(v), retain_graph=True, materialize_grads=True
            )
        return torch.cat([h.reshape(-1) for h in hv])


def adam_preconditioner(optimizer: torch.optim.Optimizer, params: list) -> torch.Tensor | None:
    """P = (1 - beta1^t) (sqrt(v_t / (1 - beta2^t)) + eps) per parameter entry, flattened; None
    when a parameter has no Adam state yet (before the first step) or another optimizer."""
    group_of = {id(p): g for g in optimizer.param_groups for p in g["params"]}
    parts = []
    for p in params:
        state, group = optimizer.state.get(p, {}), group_of.get(id(p))
        if group is None or "exp_avg_sq" not in state or "betas" not in group:
            return None
        t = float(state["step"])
        beta1, beta2 = group["betas"]
        v_hat = state["exp_avg_sq"].float() / (1 - beta2**t)
        parts.append(((1 - beta1**t) * (v_hat.sqrt() + group["eps"])).reshape(-1))
    return torch.cat(parts)


def sharpness(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    iters: int = 20,
    seed: int = 0,
    optimizer: torch.optim.Optimizer | None = None,
) -> dict[str, torch.Tensor]:
    """sharpness/hessian, and sharpness/preconditioned when ``optimizer`` holds Adam moments."""
    hvp = HessianVector(model, inputs, targets)
    generator = torch.Generator().manual_seed(seed)
    device = hvp.params[0].device
    start = torch.randn(hvp.dim, generator=generator).to(device)
    out = {"sharpness/hessian": top_eigenvalue(hvp, start, iters)}
    p = adam_preconditioner(optimizer, hvp.params) if optimizer is not None else None
    if p is not None:
        scale = p.rsqrt()  # P^-1/2
        out["sharpness/preconditioned"] = top_eigenvalue(
            lambda v: scale * hvp(scale * v), start, iters
        )
    return out


class Sharpness(Every, ProbeBatchCallback):
    """sharpness/* at the start of every ``every``-th optimizer step, on the probe batch."""

    def __init__(
        self,
        every: int = 100,
        iters: int = 20,
        batch_size: int = 8,
        probe_batch: tuple | None = None,
    ) -> None:
        super().__init__(batch_size, probe_batch)
        self.every, self.iters = every, iters
        self._last_step = -1

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        if self.targets is None:
            raise ValueError(
                "the sharpness probe needs a probe batch with targets (inputs, targets); "
                "drop sharpness from probes.enabled or pass probe_batch=(inputs, targets)"
            )

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        if not self.due(step):
            return
        optimizer = trainer.optimizers[0] if trainer.optimizers else None
        device = pl_module.device
        values = sharpness(
            pl_module.model,
            self.inputs.to(device),
            self.targets.to(device),
            self.iters,
            seed=step,
            optimizer=optimizer,
        )
        log_to_loggers(trainer, to_floats(values), step)
