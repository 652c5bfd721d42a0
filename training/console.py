"""What a run prints: the one header line before it trains, and nothing of the libraries' own
chatter that a user cannot act on. Its progress is training/reliability/progress.py's, the
final line runs/record.result_line.
"""

from __future__ import annotations

import logging
import warnings

import torch
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


def params(n: int) -> str:
    return f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n / 1e3:.0f} K"


def header_line(run, model: nn.Module, unit: str, summary: dict) -> str:
    """The one line a run prints before it trains: its name (every key its sweep varies), what
    it trains and how much per step (``run``: the typed config, training/run_config.RunConfig)."""
    from training.loggers import run_name  # Lightning's, loaded by the time a run is built

    per_step = run.batch_size * run.trainer.accumulate_grad_batches
    if unit == "tokens":
        per_step *= model.cfg.block_size
    else:
        unit = "images"
    resumed = summary.get("resumed_from_step")
    start = f", resuming at step {resumed}" if resumed else ""
    cfg = model.cfg
    qk = " +qk-norm" if cfg.qk_norm else ""  # said: it changes what "pre" or "post" trains
    p = cfg.param
    if p.name != "sp":  # the parametrization and its multipliers (models/param.py)
        qk += f" {p.name} m_N={p.width_mult(cfg.n_embd):g}"
        qk += f" m_L={p.depth_mult(cfg.n_layer):g}" if p.scales_depth else ""
    if cfg.connection != "residual":  # hyper-connections replace the residual sum
        qk += f" {cfg.connection} n={cfg.streams}" + (f"/{cfg.fracs}" if cfg.fracs > 1 else "")
    for role, mult in run.optim.lr_mults.items():  # lr multipliers by role (training/optim.py)
        qk += f" {role} lr x{mult:g}" if mult != 1.0 else ""
    threads = torch.get_num_threads()
    return (
        f"{run_name(run)}: {run.model_name} {cfg.placement.name}/{cfg.norm.name}{qk} "
        f"L{cfg.n_layer} d{cfg.n_embd}, {params(model.num_params())} params, "
        f"{per_step:,} {unit}/step, {run.max_steps} steps, "
        f"{run.trainer.accelerator} {run.trainer.precision}, {threads} "
        f"thread{'s' * (threads != 1)}{start}"
    )
