"""update_ratio/*: how far one optimizer step moves each block, relative to where it was.

    update_ratio/layer_{i}   ||theta_i(s+1) - theta_i(s)|| / ||theta_i(s)||, theta_i = all
                             parameters of blocks[i] as one vector
    update_ratio/max         the largest of them

theta(s) is copied in ``on_before_optimizer_step`` (after clipping is decided, before the step)
and compared with the weights at the end of the batch, so the ratio is the optimizer's real update
(learning rate, moments, weight decay and clipping included), logged at step s.
"""

from __future__ import annotations

import torch
from lightning.pytorch.callbacks import Callback

from training.probes.common import blocks_of, log_to_loggers, to_floats
from training.probes.gradients import group_norms


class UpdateRatio(Callback):
    """Relative size of the optimizer's update per block, every ``every`` optimizer steps."""

    def __init__(self, every: int = 10) -> None:
        self.every = every
        self.groups: dict[str, list] | None = None
        self.before: dict[int, torch.Tensor] | None = None
        self.step = -1

    def on_fit_start(self, trainer, pl_module) -> None:
        blocks = blocks_of(pl_module)
        self.groups = {f"layer_{i}": list(b.parameters()) for i, b in enumerate(blocks)}

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        step = trainer.global_step
        if step % self.every or self.groups is None:
            return
        params = [p for group in self.groups.values() for p in group]
        self.before = {id(p): p.detach().clone() for p in params}
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.before is None:
            return
        before, self.before = self.before, None
        delta = {
            pid: p.detach() - before[pid]
            for group in self.groups.values()
            for p in group
            if (pid := id(p)) in before
        }
        moved = group_norms(self.groups, delta)
        size = group_norms(self.groups, before)
        ratios = {f"update_ratio/{k}": moved[k] / size[k].clamp_min(1e-30) for k in self.groups}
        ratios["update_ratio/max"] = torch.stack(list(ratios.values())).amax()
        log_to_loggers(trainer, to_floats(ratios), self.step)
