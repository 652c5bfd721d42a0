"""Compose a run from the config: data, model, task, callbacks, loggers, trainer, as a ``Fit``.

Everything here reads the run's typed tree (training/run_config.py: every group in its
dataclass, the model kind's spec from training/specs.py), checked before the run dir opened or,
in a sweep job, as the attempt began. What this composes lives elsewhere: the fit and the
record's results in training/fit.py, what a run prints in training/console.py, its progress in
training/reliability/progress.py, the checks against a checkpoint it continues in
training/attempt.py (``Attempt.admit``), the GPT-2 architecture rule in models/pretrained.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as L
import torch
from lightning.pytorch.callbacks import Callback
from torch import nn

from models import pretrained
from models.gpt import GPT
from runs.errors import ConfigError
from runs.runfiles import CHECKPOINT, VOCAB
from training.attempt import Attempt
from training.console import header_line
from training.context import launched_as_rank_zero
from training.divergence import Divergence
from training.errors import BUILD_ERRORS
from training.fit import Fit, built_results
from training.loggers import WandbMetrics, build_loggers, run_name, wandb_run_id
from training.ngpt import SphereWeights
from training.packing import HELD, overfull, packed_devices
from training.probes.registry import probe_callbacks
from training.reliability.checkpoint_io import AtomicCheckpointIO
from training.reliability.checkpoints import metrics_cut
from training.reliability.progress import StepProgressBar, step_progress
from training.reliability.resume import ResumeCheckpoint, default_every_n_steps
from training.run_config import RunConfig


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
    return dataclasses.replace(run.model, **run.spec.data_fields(dm))


def command_key(field: str) -> str:
    """The command-line key of a flattened model config field: placement.name -> placement,
    norm.eps stays, n_layer -> model.n_layer."""
    group, _, option = field.partition(".")
    if group in ("placement", "norm", "param"):
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
    try:
        pretrained.check_architecture(model.cfg, model_cfg)
    except pretrained.ArchitectureMismatch as err:
        if "vocab_size" in err.fields:
            raise ConfigError(
                f"model.init_from={init_from} has {err.fields['vocab_size']} token ids but "
                f"data.tokenizer={getattr(run.data, 'tokenizer', None)} gives "
                f"{model_cfg.vocab_size}; use the checkpoint's tokenizer "
                "(data.tokenizer=<its dir>/tokenizer.json)"
            ) from err
        differ = " ".join(f"{command_key(k)}={v}" for k, v in err.fields.items())
        raise ConfigError(
            f"model.init_from={init_from} is another architecture; state it (the record must "
            f"say what runs): {differ}"
        ) from err
    return model


# --- callbacks and trainer -------------------------------------------------------------------
def build_callbacks(run: RunConfig, run_dir: Path, settings: dict) -> list[Callback]:
    """Progress bar, wandb metric definitions, the stability probes, divergence detection
    (after the probes: it may clear a non-finite gradient they read) and last.ckpt."""
    callbacks: list[Callback] = [SphereWeights()]  # nGPT's, first: before probes and checkpoints
    if run.trainer.enable_progress_bar:
        callbacks.append(step_progress(run_name(run), run.max_steps))
    callbacks.append(WandbMetrics())
    probes = run.probes
    if getattr(run.model, "streams", 1) > 1 and "stream_spread" not in probes.enabled:
        probes = dataclasses.replace(probes, enabled=[*probes.enabled, "stream_spread"])
    callbacks += probe_callbacks(probes)
    callbacks.append(Divergence(run.divergence))  # after the probes: it may clear their gradient
    if run.trainer.enable_checkpointing:
        every = run.checkpoint.every_n_steps or default_every_n_steps(run.max_steps)
        path = run_dir / CHECKPOINT
        callbacks.append(ResumeCheckpoint(path, every, run.checkpoint.every_s, settings))
    if HELD:  # a packed job: K of it must fit its GPU
        callbacks.append(PackFits())
    user = run.composed.get("callbacks") or {}
    return callbacks + [instantiate_callback(k, v) for k, v in user.items()]


class PackFits(Callback):
    """After a packed job's first step on a GPU, K jobs of its peak memory must fit the card."""

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step != 1 or trainer.strategy.root_device.type != "cuda":
            return
        device = trainer.strategy.root_device
        card = torch.cuda.get_device_properties(device).total_memory
        problem = overfull(HELD[1], torch.cuda.max_memory_allocated(device), card)
        if problem:
            raise ConfigError(problem)


def instantiate_callback(key: str, node: Any) -> Callback:
    """A user's Lightning callback from its ``_target_`` entry (``callbacks.<key>``)."""
    from hydra.utils import instantiate
    from omegaconf import DictConfig

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
    kwargs = packed_devices(run.trainer.kwargs())  # pack.gpus: the GPU of the job's slot
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


def allow_tf32(on_gpu: bool) -> None:
    """TF32 for the fp32 matmuls and convolutions left outside autocast, on GPUs only."""
    if on_gpu:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def build(run: RunConfig, attempt: Attempt, extra: Sequence[Callback] = ()) -> Fit:
    """Everything the fit of ``run`` (the typed config) needs, checked before the first step
    (bad input: ConfigError); ``extra``: Lightning callbacks a caller adds after the run's own
    (a benchmark's profiler)."""
    run_dir, plan = attempt.run_dir, attempt.plan
    resuming = plan.ckpt is not None
    try:  # a bad name or value fails here, before any training
        allow_tf32(run.trainer.on_gpu)
        dm = build_data(run)
        model = build_model(run, dm, resuming)
        inputs = {"data.identity": getattr(dm, "identity", None)}
        if run.init_from:  # the init checkpoint's content is part of what the run is
            inputs["model.init_from.sha256"] = pretrained.checkpoint_digest(str(run.init_from))
        task = run.spec.task(model, run.optim, total_steps=run.max_steps, seed=run.seed)
        task.record = attempt.record  # the task and its callbacks report to the run's record
        attempt.admit(task, inputs)
        callbacks = [*build_callbacks(run, run_dir, attempt.settings), *extra]
        wandb_id = wandb_run_id(run_dir) if resuming else None
        loggers, logged = build_loggers(run, run_dir, metrics_cut(plan.ckpt), wandb_id)
    except ConfigError:
        raise
    except BUILD_ERRORS as err:
        raise ConfigError(str(err)) from err
    resumed = int(plan.ckpt["global_step"]) if resuming else None
    built = built_results(dm, model, run.optim.warmup_steps, resumed)
    attempt.record.results.update({**built, **logged})
    plan.ckpt = None  # Lightning reads the file itself; free the copy
    if hasattr(dm, "save_vocab") and launched_as_rank_zero():
        dm.save_vocab(run_dir / VOCAB)
    trainer = build_trainer(run, run_dir, loggers, callbacks)
    if launched_as_rank_zero():
        print(header_line(run, model, task.unit, attempt.record.results), flush=True)
    if run.compile:
        model.compile(mode=run.compile)
    return Fit(task, dm, trainer, plan.ckpt_path)
