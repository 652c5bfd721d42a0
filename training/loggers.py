"""The run's loggers: metrics.csv in the run dir, and wandb (offline unless asked otherwise).

wandb layout: project normlab, group = the experiment or sweep, name = the variant, tags =
placement, norm, model, depth, the whole resolved config as wandb config. Charts share the
optimizer-step axis (``trainer/global_step``) and fall into panel sections by the metric prefix
before the first "/" (train, val, grad_norm, act_norm, update, attn, throughput). The run table
shows ``val/loss`` as its minimum (``val/acc`` as its maximum) and the run's ``status``,
``diverged_at_step`` and ``best_val_loss`` from summary.json.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger, WandbLogger
from omegaconf import DictConfig, OmegaConf

from data.hub import reachable
from training.resume import ResumableCSVLogger

LOGGERS = ("csv", "wandb")
WANDB_TIMEOUT_S = 3.0
# Panel sections (metric prefixes) drawn against the optimizer step.
SECTIONS = ("train", "val", "grad_norm", "act_norm", "update", "attn", "throughput")
SUMMARY_OF = {"val/loss": "min", "val/acc": "max", "train/loss": "min"}
STEP_AXIS = "trainer/global_step"  # WandbLogger logs the step under this name


class LoggerError(ValueError):
    """A logger that cannot start; the message names the fix."""


def wandb_group(cfg: DictConfig) -> str | None:
    """Explicit group, else the experiment's name, else the sweep's dir for a multirun."""
    if cfg.get("group"):
        return str(cfg.group)
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hydra_cfg = HydraConfig.get()
    experiment = hydra_cfg.runtime.choices.get("experiment")
    if experiment:
        return str(experiment)
    if hydra_cfg.mode == RunMode.MULTIRUN:
        return "sweep-" + "-".join(Path(hydra_cfg.sweep.dir).parts[-2:])
    return None


def check_wandb_online(mode: str | None) -> None:
    """wandb online without a network would retry for minutes: fail in seconds instead."""
    if (mode or os.environ.get("WANDB_MODE", "online")) != "online":
        return
    url = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai"))
    host, port = url.hostname or "api.wandb.ai", url.port or (80 if url.scheme == "http" else 443)
    if not reachable(host, port, WANDB_TIMEOUT_S):
        raise LoggerError(
            f"logger.wandb.mode=online but {host} is unreachable (tried {WANDB_TIMEOUT_S:g}s); "
            "use logger.wandb.mode=offline and `wandb sync <run_dir>/wandb/offline-run-*` later"
        )


def build_loggers(
    cfg: DictConfig,
    run_dir: Path,
    cut: tuple[int, int | None] = (0, None),
    wandb_id: str | None = None,
) -> list[Logger]:
    """CSV and/or wandb per ``cfg.logger``. A resumed run continues metrics.csv from its
    checkpoint's ``cut`` (training/resume.py) and the wandb run ``wandb_id``."""
    node = cfg.get("logger") or {}
    unknown = sorted(set(node) - set(LOGGERS))
    if unknown:
        raise LoggerError(f"unknown logger '{unknown[0]}'; choose from: {', '.join(LOGGERS)}")
    loggers: list[Logger] = []
    if "csv" in node:
        loggers.append(ResumableCSVLogger(run_dir, cut=cut, **node.csv))
    if "wandb" in node:
        w = OmegaConf.to_container(node.wandb, resolve=True)
        check_wandb_online(w.get("mode"))
        config = OmegaConf.to_container(cfg, resolve=True)
        config.pop("hydra", None)
        tags = [cfg.placement.name, cfg.norm.name, cfg.model.name, f"L{cfg.model.n_layer}"]
        loggers.append(
            WandbLogger(
                name=cfg.name,
                save_dir=str(run_dir),
                group=wandb_group(cfg),
                tags=tags,
                config=config,
                id=wandb_id,  # None: a new run; else continue that one (resume="allow")
                **w,
            )
        )
    return loggers


def define_wandb_metrics(run: Any) -> None:
    """Step axis, panel sections and run-table summaries (see the module docstring)."""
    run.define_metric(STEP_AXIS)
    for section in SECTIONS:
        run.define_metric(f"{section}/*", step_metric=STEP_AXIS)
    run.define_metric("lr", step_metric=STEP_AXIS)
    for name, summary in SUMMARY_OF.items():
        run.define_metric(name, step_metric=STEP_AXIS, summary=summary)


class WandbMetrics(Callback):
    """Defines the wandb metrics once the run exists (rank zero starts it at fit start)."""

    def on_fit_start(self, trainer, pl_module) -> None:
        if not trainer.is_global_zero:
            return
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                define_wandb_metrics(logger.experiment)


def finish_wandb(summary: dict | None = None) -> None:
    """Put the run's outcome in the wandb run table, then close the run (so the next job of a
    multirun starts its own)."""
    import wandb

    if wandb.run is None:
        return
    if summary is not None:
        keys = ("status", "diverged_at_step", "best_val_loss", "best_val_acc", "final_val_loss")
        wandb.run.summary.update({k: summary[k] for k in keys if k in summary})
    wandb.finish(exit_code=0 if summary is None or summary.get("status") != "failed" else 1)
