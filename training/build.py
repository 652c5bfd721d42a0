"""Build a run from the composed config: data, model, task, callbacks, loggers, trainer; fit it.

The composed config is first read into its typed tree (training/run_config.py: every group in
its dataclass, the model kind's spec from training/specs.py), so an unknown key, name or value
fails before any training with one clear line; everything here reads that tree.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import WandbLogger
from omegaconf import DictConfig
from torch import nn

from models.gpt import GPT
from models.kernels import kernel_used
from training.config import (
    gpu_accelerator,
)
from training.divergence import Divergence
from training.errors import BUILD_ERRORS, ConfigError, launched_as_rank_zero
from training.loggers import WandbMetrics, build_loggers, wandb_group, wandb_run_id
from training.mfu import utilization
from training.ngpt import SphereWeights
from training.probes import probe_callbacks, probe_summary
from training.record import RunRecord, Status, did_not_train
from training.reliability.checkpoints import AtomicCheckpointIO, check_fits, metrics_cut
from training.reliability.progress import StepProgressBar
from training.reliability.resume import ResumeCheckpoint, default_every_n_steps
from training.run_config import RunConfig, typed_config
from training.rundir import RunDir
from training.runfiles import CHECKPOINT, VOCAB, flatten
from training.task import TrainTask

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


def build_data(run: RunConfig) -> L.LightningDataModule:
    """The datamodule, set up now: the model's vocabulary or image shape depends on it."""
    dm = run.spec.datamodule(run)
    try:
        dm.setup("fit")
    except BUILD_ERRORS:
        raise
    except Exception as err:  # the datasets library's own errors: one line, naming the inputs
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        raise ConfigError(
            f"cannot load data={run.data.source} ({type(err).__name__}: {first}); check "
            "data.paths / data.hf_id and that the files hold text (or images)"
        ) from err
    return dm


def model_config(run: RunConfig, dm: L.LightningDataModule) -> Any:
    """Model config = model node + the placement and norm nodes as its sub-configs + the
    fields the data decides."""
    fields = {**run.model, **run.spec.data_fields(dm)}
    return run.spec.config(**fields, placement=run.placement, norm=run.norm)


def command_key(field: str) -> str:
    """The command-line key of a flattened model config field: placement.name -> placement,
    norm.eps stays, n_layer -> model.n_layer."""
    group, _, option = field.partition(".")
    if group in ("placement", "norm"):
        return group if option == "name" else field
    return f"model.{field}"


def build_model(run: RunConfig, dm: L.LightningDataModule, resuming: bool = False) -> nn.Module:
    """The model the config describes; with ``model.init_from`` a GPT-2 checkpoint's weights,
    whose architecture the config must then state (so that the run's record is what ran). A
    resumed run takes its weights from its own checkpoint: the init dir is not read again."""
    model_cfg = model_config(run, dm)
    init_from = run.init_from
    if not init_from or resuming:
        return run.spec.module(model_cfg)
    if run.spec.module is not GPT:
        raise ConfigError("model.init_from loads GPT-2 checkpoints: use it with model=gpt")
    model = GPT.from_hf(str(init_from))
    loaded = flatten(dataclasses.asdict(model.cfg))
    wanted = flatten(dataclasses.asdict(model_cfg))
    differ = [
        f"{command_key(k)}={loaded[k]}"
        for k in loaded
        if k in wanted and wanted[k] != loaded[k] and k != "vocab_size"
    ]
    if loaded["vocab_size"] != wanted["vocab_size"]:
        raise ConfigError(
            f"model.init_from={init_from} has {loaded['vocab_size']} token ids but "
            f"data.tokenizer={getattr(run.data, 'tokenizer', None)} gives {wanted['vocab_size']}; "
            "use the checkpoint's tokenizer (data.tokenizer=<its dir>/tokenizer.json)"
        )
    if differ:
        raise ConfigError(
            f"model.init_from={init_from} is another architecture; state it (the record must "
            f"say what runs): {' '.join(differ)}"
        )
    return model


# --- callbacks and trainer -------------------------------------------------------------------
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


def parallel_sweep() -> bool:
    """Whether this job runs beside others (a multirun on the joblib launcher)."""
    return parallel_jobs() > 1


def parallel_jobs() -> int:
    """How many jobs of this sweep run at once: the joblib launcher's n_jobs (-1: every core),
    else 1."""
    from hydra.core.hydra_config import HydraConfig

    from training.errors import in_multirun

    if not in_multirun():
        return 1
    launcher = HydraConfig.get().launcher
    if "joblib" not in str(launcher.get("_target_", "")):
        return 1
    n = launcher.get("n_jobs") or 1
    return max(1, os.cpu_count() or 1) if n == -1 else max(1, int(n))


def build_callbacks(run: RunConfig, run_dir: Path, settings: dict) -> list[Callback]:
    """Progress bar, wandb metric definitions, the stability probes, divergence detection
    (after the probes: it may clear a non-finite gradient they read) and last.ckpt."""
    callbacks: list[Callback] = [SphereWeights()]  # nGPT's, first: before probes and checkpoints
    if run.trainer.get("enable_progress_bar", True) and parallel_sweep():
        callbacks.append(StepLines(run.name, run.max_steps // 10))
    elif run.trainer.get("enable_progress_bar", True):
        callbacks.append(StepProgressBar(leave=True))
    callbacks.append(WandbMetrics())
    callbacks += probe_callbacks(run.probes)
    callbacks.append(Divergence(run.divergence))  # after the probes: it may clear their gradient
    if run.trainer.get("enable_checkpointing", True):
        every = run.checkpoint.every_n_steps or default_every_n_steps(run.max_steps)
        path = run_dir / CHECKPOINT
        callbacks.append(ResumeCheckpoint(path, every, run.checkpoint.every_s, settings))
    user = run.composed.get("callbacks") or {}
    return callbacks + [instantiate_callback(k, v) for k, v in user.items()]


def instantiate_callback(key: str, node: DictConfig) -> Callback:
    """A user's Lightning callback from its ``_target_`` entry (``callbacks.<key>``)."""
    from hydra.utils import instantiate

    if not isinstance(node, DictConfig) or "_target_" not in node:
        raise ConfigError(f"callbacks.{key} needs a _target_: callbacks.{key}._target_=<class>")
    try:
        callback = instantiate(node)
    except Exception as err:  # an unknown class or a bad argument: one line
        cause = err.__cause__ or err
        raise ConfigError(f"callbacks.{key} ({node._target_}) cannot start: {cause}") from err
    if not isinstance(callback, Callback):
        raise ConfigError(f"callbacks.{key}: {node._target_} is not a Lightning Callback")
    return callback


def build_trainer(run: RunConfig, run_dir: Path, loggers: list, callbacks: list) -> L.Trainer:
    kwargs = dict(run.trainer)
    kwargs["enable_progress_bar"] = any(isinstance(c, StepProgressBar) for c in callbacks)
    try:
        return L.Trainer(
            default_root_dir=run_dir,
            logger=loggers or False,
            callbacks=callbacks,
            plugins=[AtomicCheckpointIO()],
            **kwargs,
        )
    except TypeError as err:
        raise ConfigError(f"trainer: {err}; keys under trainer are lightning.Trainer args") from err


def allow_tf32(accelerator: str) -> None:
    """TF32 for the fp32 matmuls and convolutions left outside autocast, on GPUs only."""
    if gpu_accelerator(accelerator):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def busy_cores(window_s: float = 0.25) -> float | None:
    """How many CPUs other processes keep busy now: the non-idle share of /proc/stat's CPU time
    over ``window_s`` (this process sleeps meanwhile), times the CPU count; None off Linux."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(window_s)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    if total1 <= total0:
        return None
    return (1 - (idle1 - idle0) / (total1 - total0)) * (os.cpu_count() or 1)


def default_threads(jobs_beside: int = 1) -> int:
    """The cores this process may use that no other process keeps busy, shared with the jobs
    of a parallel sweep: two threads on a core another process holds wait on each other at
    every op (100 steps of the default job on 2 cores beside 2 busy ones: 113 s on 2 threads,
    56 s on 1, medians in docs/benchmarks.md)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    if jobs_beside > 1:
        return max(1, cores // jobs_beside)
    busy = busy_cores()
    return cores if busy is None else max(1, min(cores, round(cores - busy)))


def set_threads(num_threads: int | None) -> int:
    """``num_threads`` torch CPU threads, or ``default_threads()`` when it is null."""
    n = num_threads or default_threads(parallel_jobs())
    torch.set_num_threads(n)
    return n


# --- the run ---------------------------------------------------------------------------------
@dataclass
class Run:
    """A built run; ``fit()`` trains it and puts what it measured into the run's record."""

    task: TrainTask
    datamodule: L.LightningDataModule
    trainer: L.Trainer
    ckpt_path: Path | None

    @property
    def record(self) -> RunRecord:
        return self.task.record

    def fit(self) -> None:
        """Train (or continue), then validate and checkpoint the final weights unless the run
        diverged or was interrupted (a diverged run keeps no checkpoint that looks final)."""
        trainer, task, record = self.trainer, self.task, self.record
        try:
            trainer.fit(task, datamodule=self.datamodule, ckpt_path=self.ckpt_path)
        except BaseException:
            record.results["steps"] = trainer.global_step  # how far it got, whatever stopped it
            raise
        resume = next((c for c in trainer.callbacks if isinstance(c, ResumeCheckpoint)), None)
        if resume is not None and resume.interrupted is not None:
            record.interrupt(resume.interrupted)
        record.complete()  # the fit ran to its end, unless it diverged or was interrupted
        if record.healthy and task.last_val_step != trainer.global_step:
            trainer.validate(task, datamodule=self.datamodule, verbose=False)
        if record.healthy and resume is not None:
            resume.save(trainer, final=True)
        steps = trainer.global_step
        if record.status == Status.DIVERGED and record.diverged_at_step is not None:
            steps = record.diverged_at_step  # the healthy steps; the diverged one is not counted
        record.results.update(
            {
                **task.results(),
                "steps": steps,
                "precision": str(trainer.precision),  # what ran (Lightning's resolved setting)
                **utilization(task.model, task.unit, task.throughput, str(trainer.precision)),
                "derived": task.model.derived(),  # DeepNorm's alpha and beta, Admin's omegas
                "fused_rmsnorm": kernel_used(),
                **probe_summary(trainer.callbacks),  # loss_spikes
            }
        )
        record.results["did_not_train"] = did_not_train(record.summary())


def params(n: int) -> str:
    return f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n / 1e3:.0f} K"


def header_line(run: RunConfig, model: nn.Module, task: TrainTask, summary: dict) -> str:
    """The one line a run prints before it trains: what it trains and how much per step."""
    per_step = run.batch_size * run.trainer.get("accumulate_grad_batches", 1)
    unit = "images"
    if task.unit == "tokens":
        per_step, unit = per_step * model.cfg.block_size, "tokens"
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


def build(cfg: DictConfig, attempt: RunDir) -> Run:
    """Everything the fit needs, checked before the first step (bad input: ConfigError)."""
    run_dir, plan = attempt.run_dir, attempt.plan
    try:  # a bad name or value fails here, before any training
        run = typed_config(cfg)  # every group checked, once
        allow_tf32(run.accelerator)
        dm = build_data(run)
        attempt.check_data(getattr(dm, "identity", None))
        model = build_model(run, dm, resuming=plan.ckpt is not None)
        if run.init_from:  # the init checkpoint's content is part of what the run is
            from models.pretrained import checkpoint_digest

            digest = checkpoint_digest(str(run.init_from))
            attempt.check_identity("model.init_from.sha256", digest, needed=plan.ckpt is None)
        optim = run.optim
        task = run.spec.task(model, optim, total_steps=run.max_steps, seed=run.seed)
        task.record = attempt.record  # the task and its callbacks report to the run's record
        if plan.ckpt is not None:
            check_fits(plan.ckpt_path, plan.ckpt, task)
        wandb_id = wandb_run_id(run_dir) if plan.ckpt is not None else None
        callbacks = build_callbacks(run, run_dir, attempt.settings)
        loggers = build_loggers(cfg, run_dir, metrics_cut(plan.ckpt), wandb_id)
    except ConfigError:
        raise
    except BUILD_ERRORS as err:
        raise ConfigError(str(err)) from err
    results = attempt.record.results
    if hasattr(dm, "lossy_tokenizer"):
        results["lossy_tokenizer"] = dm.lossy_tokenizer
    # The loss of a model that learned nothing useful: the plots draw it as a reference line.
    if hasattr(dm, "unigram_loss"):
        results["unigram_loss"] = dm.unigram_loss
    elif hasattr(dm, "num_classes"):
        results["chance_loss"] = math.log(dm.num_classes)
    results.update(
        params=model.num_params(),
        resumed_from_step=None if plan.ckpt is None else int(plan.ckpt["global_step"]),
        warmup_steps=optim.warmup_steps,
    )
    if any(isinstance(logger, WandbLogger) for logger in loggers):  # compare.py reads it back
        results["wandb_group"] = wandb_group(cfg)
    plan.ckpt = None  # Lightning reads the file itself; free the copy
    if hasattr(dm, "save_vocab") and launched_as_rank_zero():
        dm.save_vocab(run_dir / VOCAB)
    if launched_as_rank_zero():
        print(header_line(run, model, task, results), flush=True)
    if run.compile:
        model.compile(mode=run.compile)
    return Run(task, dm, build_trainer(run, run_dir, loggers, callbacks), plan.ckpt_path)
