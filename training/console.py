"""What a run prints: the one header line before it trains, its progress (a bar, or plain lines
in a parallel sweep), and nothing of the libraries' own chatter that a user cannot act on.
The final line is training/record.result_line.
"""

from __future__ import annotations

import logging
import warnings

import torch
from lightning.pytorch.callbacks import Callback
from torch import nn

# The run dir already holds .hydra/ and vocab.json when the logger and checkpoint first look.
warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists and is not empty")
# The task logs val metrics already reduced across ranks (exact sums, then the ratio).
warnings.filterwarnings("ignore", message=r".*when logging on epoch level in distributed")
# A deprecation inside lightning's own use of torch's pytree; nothing a user can act on.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
# Lightning's info lines (GPU/TPU availability, tips, "fit stopped: max_steps reached"): the
# header line and the final line say what a run is and how it ended.
logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)


class StepLines(Callback):
    """Progress as plain lines prefixed by the variant, every tenth of the run: what parallel
    sweep jobs print instead of progress bars, which would draw over each other."""

    def __init__(self, name: str, every: int) -> None:
        self.name, self.every = name, max(1, every)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        step = trainer.global_step
        if trainer.is_global_zero and (step % self.every == 0 or step == trainer.max_steps):
            loss = trainer.callback_metrics.get("train/loss")
            text = "" if loss is None else f" train/loss={float(loss):.4f}"
            print(f"[{self.name}] step {step}/{trainer.max_steps}{text}", flush=True)


def params(n: int) -> str:
    return f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n / 1e3:.0f} K"


def header_line(run, model: nn.Module, unit: str, summary: dict) -> str:
    """The one line a run prints before it trains: what it trains and how much per step
    (``run``: the typed config, training/run_config.RunConfig)."""
    per_step = run.batch_size * run.trainer.get("accumulate_grad_batches", 1)
    if unit == "tokens":
        per_step *= model.cfg.block_size
    else:
        unit = "images"
    resumed = summary.get("resumed_from_step")
    start = f", resuming at step {resumed}" if resumed else ""
    cfg = model.cfg
    return (
        f"{run.name}: {run.kind} {cfg.placement.name}/{cfg.norm.name} "
        f"L{cfg.n_layer} d{cfg.n_embd}, {params(model.num_params())} params, "
        f"{per_step:,} {unit}/step, {run.max_steps} steps, "
        f"{run.accelerator} {run.trainer.get('precision')}, {torch.get_num_threads()} threads"
        f"{start}"
    )
