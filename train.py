"""Train one model from the composed config; `-m` sweeps comma-separated values.

    python train.py                                   # Pre-LN LayerNorm GPT on Python's docs
    python train.py placement=post norm=rmsnorm model.n_layer=12
    python train.py model=vit                         # ViT on the bundled digits
    python train.py -m placement=post,pre,deepnorm seed=0,1,2
    python train.py logger.wandb.mode=online          # stream to wandb (default: offline)
    python train.py mode=init_probe init_probe.depths=[6,12,24,48]   # F1 at init, no training

Each run dir gets metrics.csv, summary.json, last.ckpt (and vocab.json for text). A diverged run
ends cleanly with status "diverged" and exit code 0. The same command into the same dir
(hydra.run.dir=... / hydra.sweep.dir=...) skips a finished run and resumes an unfinished one
from its last checkpoint; resume=false starts it fresh. A bad setting exits with one line
naming the fix (debug=true: the traceback too). In a sweep a failed run is recorded with status
"failed" and the others go on; the sweep's exit code says whether any failed.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import hydra
import lightning.pytorch as L
from omegaconf import DictConfig, OmegaConf

from training.build import (
    ConfigError,
    allow_tf32,
    base_summary,
    build_callbacks,
    build_data,
    build_model,
    build_optim,
    build_probe_configs,
    build_trainer,
    check_run_length,
    compile_mode,
    model_config,
    model_spec,
    result_line,
    set_threads,
    write_summary,
)
from training.divergence import Divergence
from training.init_probe import format_table, init_probe, write_probe_json
from training.launch import (
    ChoiceError,
    check_choices,
    end_process_group,
    in_multirun,
    launch_scope,
    launched_as_rank_zero,
)
from training.loggers import build_loggers, finish_wandb
from training.probes import probe_summary
from training.resume import (
    ResumePlan,
    check_fits,
    plan_resume,
    result_config,
    set_aside,
    wandb_run_id,
)

BUILD_ERRORS = (TypeError, ValueError, OSError)  # OSError: missing files, offline hub


def train(cfg: DictConfig, run_dir: Path, plan: ResumePlan, summary: dict) -> dict:
    """Fit (or continue fitting) as configured; returns the task's part of the summary."""
    try:  # a bad name or value fails here, before any training
        check_run_length(cfg)
        mode = compile_mode(cfg.compile)
        allow_tf32(str(cfg.trainer.get("accelerator", "auto")))
        spec = model_spec(cfg)
        probes, divergence = build_probe_configs(cfg)
        dm = build_data(cfg, spec)
        model = build_model(cfg, spec, dm)
        task = spec.task(model, build_optim(cfg), total_steps=cfg.trainer.max_steps, seed=cfg.seed)
        if plan.ckpt is not None:
            check_fits(plan.ckpt_path, plan.ckpt, task)
        wandb_id = wandb_run_id(run_dir) if plan.ckpt is not None else None
        loggers = build_loggers(cfg, run_dir, plan.metrics_cut, wandb_id)
    except BUILD_ERRORS as err:
        raise ConfigError(str(err)) from err
    summary.update(params=model.num_params(), resumed_from_step=plan.start_step)
    plan.ckpt = None  # Lightning reads the file itself; free the copy
    task.run_config = summary["run_config"]
    if hasattr(dm, "save_vocab") and launched_as_rank_zero():
        dm.save_vocab(run_dir / "vocab.json")
    if mode:
        model.compile(mode=mode)
    trainer = build_trainer(
        cfg, run_dir, loggers, build_callbacks(cfg, run_dir, probes, divergence)
    )
    with launch_scope(run_dir):
        trainer.fit(task, datamodule=dm, ckpt_path=plan.ckpt_path, weights_only=False)
        # Validate and checkpoint the final weights, unless they are a diverged run's.
        completed = task.status != "diverged"
        if completed and task.last_val_step != trainer.global_step:
            trainer.validate(task, datamodule=dm, verbose=False)
        if completed and cfg.trainer.get("enable_checkpointing", True):
            # Every row is logged, the final validation's too.
            task.metrics_below, task.val_done_at = trainer.global_step + 1, None
            for logger in trainer.loggers:
                logger.save()
            trainer.save_checkpoint(run_dir / "last.ckpt", weights_only=False)
    reason = next((c.reason for c in trainer.callbacks if isinstance(c, Divergence)), None)
    extra = probe_summary(trainer.callbacks)  # loss_spikes
    return {**task.results(), "steps": trainer.global_step, "divergence_reason": reason, **extra}


def probe_at_init(cfg: DictConfig, run_dir: Path, plan: ResumePlan, summary: dict) -> dict:
    """F1's quantities at init (training/init_probe.py) on K real train batches; no training."""
    node = cfg.init_probe
    try:
        if node.batches < 1 or node.batch_size < 1:
            raise ValueError("init_probe.batches and init_probe.batch_size must be >= 1")
        spec = model_spec(cfg)
        dm = build_data(cfg, spec)
        base = model_config(cfg, spec, dm)
        batches = [dm.train_batch(step, node.batch_size) for step in range(node.batches)]
        args = [list(node.placements), list(node.depths), list(node.seeds)]
        result = init_probe(base, batches, *args)
    except BUILD_ERRORS as err:
        raise ConfigError(str(err)) from err
    if launched_as_rank_zero():
        write_probe_json(result, run_dir / "probe.json")
    print(format_table(result), flush=True)
    # The probed placements, not the config's placement node (it plays no part here).
    return {**result, "status": "completed", "steps": 0, "placement": ",".join(args[0])}


MODES: dict[str, Callable[[DictConfig, Path, ResumePlan, dict], dict]] = {
    "train": train,
    "init_probe": probe_at_init,
}


def fingerprint(cfg: DictConfig) -> dict:
    """The settings that decide this run's result (compared when a run dir is reused)."""
    config = result_config(OmegaConf.to_container(cfg, resolve=True))
    if cfg.mode != "init_probe":
        config = {k: v for k, v in config.items() if not k.startswith("init_probe.")}
    return config


def run(cfg: DictConfig) -> dict:
    """Run as configured and return the summary (also written to <run_dir>/summary.json)."""
    if cfg.mode not in MODES:
        raise ConfigError(f"unknown mode '{cfg.mode}'; choose one of: {', '.join(MODES)}")
    run_dir = Path(cfg.run_dir)
    settings = fingerprint(cfg)
    try:
        plan = plan_resume(run_dir, cfg.resume, cfg.ckpt_path, settings)
    except BUILD_ERRORS as err:
        raise ConfigError(str(err)) from err
    if plan.finished is not None:
        print(f"skip {run_dir}: already {plan.finished['status']} (resume=false reruns it)")
        return plan.finished
    zero = launched_as_rank_zero()  # other ranks neither move nor write files
    run_dir.mkdir(parents=True, exist_ok=True)
    if zero and not cfg.resume and not cfg.ckpt_path:
        set_aside(run_dir)
    summary = {**base_summary(cfg, run_dir), "run_config": settings}
    start = time.perf_counter()
    try:
        set_threads(cfg.num_threads)
        L.seed_everything(cfg.seed, workers=True, verbose=False)
        summary.update(MODES[cfg.mode](cfg, run_dir, plan, summary))
    except BaseException as err:
        summary.update(status="failed", error=f"{type(err).__name__}: {err}")
        raise
    finally:
        summary["wall_s"] = round(time.perf_counter() - start, 2)
        if zero:
            write_summary(run_dir / "summary.json", summary)
        finish_wandb(summary)
        end_process_group()
    if zero:
        print(result_line(summary), flush=True)
    return summary


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    debug = bool(cfg.get("debug")) or os.environ.get("HYDRA_FULL_ERROR") == "1"
    try:
        run(cfg)
    except ConfigError as err:
        if debug:
            raise
        if not in_multirun():
            raise SystemExit(f"error: {err}") from None
        print(f"error: {err}", file=sys.stderr, flush=True)  # recorded; the sweep goes on
    except Exception:
        if debug or not in_multirun():
            raise
        traceback.print_exc()  # a crash: the whole story, and the sweep goes on


if __name__ == "__main__":
    try:
        check_choices(sys.argv[1:])
    except ChoiceError as err:
        raise SystemExit(f"error: {err}") from None
    main()
