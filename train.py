"""Train one model from the composed config; `-m` sweeps comma-separated values.

    python train.py                                   # Pre-LN LayerNorm GPT on Python's docs
    python train.py placement=post norm=rmsnorm model.n_layer=12
    python train.py model=vit                         # ViT on the bundled digits
    python train.py -m placement=post,pre,deepnorm seed=0,1,2
    python train.py logger.wandb.mode=online          # stream to wandb (default: offline)

Each run dir gets metrics.csv, summary.json, last.ckpt (and vocab.json for text). A diverged run
ends cleanly with status "diverged" and exit code 0; a crash writes status "failed" and re-raises.
"""

from __future__ import annotations

import time
from pathlib import Path

import hydra
import lightning.pytorch as L
from omegaconf import DictConfig

from models.run import (
    ConfigError,
    base_summary,
    build_data,
    build_loggers,
    build_model,
    build_optim,
    build_trainer,
    finish_wandb,
    model_spec,
    result_line,
    set_threads,
    write_summary,
)


def run(cfg: DictConfig) -> dict:
    """Train as configured and return the summary (also written to <run_dir>/summary.json)."""
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    summary = base_summary(cfg, run_dir)
    start = time.perf_counter()
    try:
        set_threads(cfg.num_threads)
        L.seed_everything(cfg.seed, workers=True)
        try:  # a bad name or value fails here, before any training
            spec = model_spec(cfg)
            dm = build_data(cfg, spec)
            model = build_model(cfg, spec, dm)
            optim = build_optim(cfg)
        except (TypeError, ValueError, OSError) as err:  # OSError: missing files, offline hub
            raise ConfigError(str(err)) from err
        summary["params"] = model.num_params()
        if hasattr(dm, "save_vocab"):
            dm.save_vocab(run_dir / "vocab.json")
        if cfg.compile:
            model.compile(mode=cfg.compile)
        task = spec.task(model, optim, total_steps=cfg.trainer.max_steps)
        trainer = build_trainer(cfg, run_dir, build_loggers(cfg, run_dir))
        trainer.fit(task, datamodule=dm, ckpt_path=cfg.ckpt_path, weights_only=False)
        # Validate and checkpoint the final weights, unless they are a diverged run's.
        completed = task.status != "diverged"
        if completed and task.last_val_step != trainer.global_step:
            trainer.validate(task, datamodule=dm, verbose=False)
        if completed and cfg.trainer.get("enable_checkpointing", True):
            trainer.save_checkpoint(run_dir / "last.ckpt", weights_only=False)
        summary.update(task.results(), steps=trainer.global_step)
    except BaseException as err:
        summary.update(status="failed", error=f"{type(err).__name__}: {err}")
        raise
    finally:
        summary["wall_s"] = round(time.perf_counter() - start, 2)
        write_summary(run_dir / "summary.json", summary)
        finish_wandb()
    print(result_line(summary), flush=True)
    return summary


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None


if __name__ == "__main__":
    main()
