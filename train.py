"""Train one model from the composed config; `-m` sweeps comma-separated values.

    python train.py                                   # Pre-LN LayerNorm GPT on Python's docs
    python train.py placement=post norm=rmsnorm model.n_layer=12
    python train.py model=vit                         # ViT on the bundled digits
    python train.py -m placement=post,pre,deepnorm seed=0,1,2
    python train.py logger.wandb.mode=online          # stream to wandb (default: offline)

Where each concern lives: training/attempt.py (the run dir: lock, skip / resume / fresh),
runs/record.py (the run's status and summary.json), training/run_config.py (the config as
one typed tree, checked once), training/build.py (the tree -> data, model, task, callbacks,
loggers, trainer), training/fit.py (the fit and the results it records), training/errors.py
(the one-line error policy), training/launch.py (the command line, DDP under sweeps),
training/sweep.py (the sweep's grid, its checks and its status line).

Each run dir gets metrics.csv, summary.json, last.ckpt (and vocab.json for text). A diverged run
ends cleanly with status "diverged" and exit code 0; SIGTERM / SIGINT save a checkpoint at the
next step, record "interrupted" and exit 143 / 130. The same command into the same dir skips a
finished run and resumes an unfinished one; resume=false starts it fresh.
"""

# ruff: noqa: E402 (the signal handlers come first: a signal during the imports is one line too)
from __future__ import annotations

import sys
import warnings

if __name__ == "__main__":
    from training.errors import stop_on_signals

    stop_on_signals()

from typing import TYPE_CHECKING

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from runs.record import Status, result_line
from training.arms import drop_inapplicable
from training.context import in_multirun
from training.errors import Interrupted, one_line_errors
from training.launch import launch_scope, packed, preflight
from training.run_config import RunConfig, check_config, typed_config
from training.sweep import another_shard, for_the_sweeper, job_outcome

# conf/hydra/launcher/ray.yaml fills in the Ray launcher's own schema (same name, so its keys
# take overrides without a `+`); Hydra warns about that pattern on every job.
warnings.filterwarnings("ignore", message=r".*validated against ConfigStore schema with the same")

if TYPE_CHECKING:
    from collections.abc import Sequence

    from lightning.pytorch.callbacks import Callback

    from training.attempt import Attempt

# torch, Lightning and the harness that needs them load when a run starts, not before: --help,
# shell completion and a bad command line answer in a fraction of a second.


def attempt(
    cfg: DictConfig, callbacks: Sequence[Callback] = (), run: RunConfig | None = None
) -> Attempt:
    """Skip the run ``cfg`` describes when its dir holds a finished one, else resume or start
    it; the run dir holds its record (summary.json), written whatever happens. ``callbacks``:
    Lightning callbacks added after the run's own (e.g. a benchmark's profiler); ``run``: the
    typed tree of ``cfg`` when the caller checked it already (else read here, where a sweep
    job records a bad value as its failure)."""
    import lightning.pytorch as L

    from training.attempt import Attempt
    from training.build import build
    from training.loggers import finish_wandb
    from training.threads import set_threads

    with Attempt(cfg) as this:
        if this.done_before is not None:
            return this
        try:
            this.record.results["threads"] = set_threads(cfg.num_threads)
            L.seed_everything(cfg.seed, workers=True, verbose=False)
            fitted = build(run or typed_config(cfg), this, callbacks)
            with launch_scope(this.run_dir):
                fitted.fit()
        finally:
            finish_wandb(this.summary)  # wandb's run closes with the outcome, whatever happens
    if this.rank_zero:
        print(result_line(this.summary), flush=True)
    if this.record.status == Status.INTERRUPTED:
        raise Interrupted(this.record.interrupted_by)
    return this


def run(cfg: DictConfig, callbacks: Sequence[Callback] = ()) -> dict:
    """Run as configured and return the summary (also in <run_dir>/summary.json)."""
    return attempt(cfg, callbacks).summary


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
@for_the_sweeper
@one_line_errors
def main(cfg: DictConfig) -> dict:
    # torch-free: a bad key or value is refused before torch loads. A sweep checks its grid
    # once (training/sweep.py) and each job records its own failure.
    if in_multirun() and another_shard(cfg, HydraConfig.get().job.num):
        return {"outcome": "elsewhere"}  # pack.shard: another launch runs this job
    drop_inapplicable(cfg)  # an arm's key in a sweep across a group's options (preflight)
    run = None if in_multirun() else check_config(cfg)
    with packed(cfg):  # pack.gpus: this job's GPU slot, K jobs at most on each GPU
        this = attempt(cfg, run=run)
    return job_outcome(this.summary, skipped=this.done_before is not None)


if __name__ == "__main__":
    sys.argv[1:] = preflight(sys.argv[1:])
    main()
