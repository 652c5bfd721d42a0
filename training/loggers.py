"""The run's loggers: metrics.csv in the run dir, wandb (offline unless asked otherwise), and
any Lightning logger named by ``_target_`` (TensorBoard, MLflow: conf/logger/).

wandb layout, as its UI groups runs: project = ``logger.wandb.project`` (``${study}``: one per
study, each experiment naming its own), group = the sweep (one sweep dir, one group; a single
run has none unless ``group=`` names one), job_type = the variant without its seed (so
group-by averages the seeds), name = the variant with its seed (``run_name``: every swept key,
so no two runs of a sweep share a name), tags = placement, norm, model, depth and the
experiment, and the whole resolved config as wandb config (``experiment`` included). Charts
share the optimizer-step axis (``trainer/global_step``) and fall into panel sections by the
metric prefix before the first "/".
The run table shows ``val/loss`` as its minimum (``val/acc`` as its maximum) and the run's
status, divergence step and best and final losses from summary.json. ``last.ckpt`` becomes an
artifact with ``logger.wandb.log_model=true``. wandb's console output stays quiet unless
``logger.wandb.verbose=true``.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger, WandbLogger
from omegaconf import OmegaConf

from data.hub import check_wandb_online
from runs.jobs import recorded_constants
from runs.runfiles import CHECKPOINT
from runs.runfiles import wandb_group as group_rule
from runs.settings import is_operational
from runs.summary import wandb_fields
from training.reliability.metrics_csv import ResumableCSVLogger
from training.run_config import RunConfig

# Panel sections (metric prefixes) drawn against the optimizer step.
SECTIONS = ("train", "val", "grad_norm", "act_norm", "update", "attn", "throughput")
SECTIONS += ("act_max", "block_cos", "update_ratio", "logits", "sharpness")  # probes/
SECTIONS += ("act_massive", "act_kurtosis", "linear_out", "headroom", "saturation", "spectral")
SECTIONS += ("stable_rank", "adam", "layer_drop", "spike", "guard")  # the instruments, guards
# summary.json fields copied into the wandb run table (declared in runs/summary.py).
SUMMARY_FIELDS = wandb_fields()
SUMMARY_OF = {"val/loss": "min", "val/bpb": "min", "val/acc": "max", "train/loss": "min"}
STEP_AXIS = "trainer/global_step"  # WandbLogger logs the step under this name


class LoggerError(ValueError):
    """A logger that cannot start; the message names the fix."""


def hydra_context() -> tuple[str | None, str | None]:
    """(experiment name, sweep dir) of the Hydra job this process runs, when there is one."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None, None
    hydra_cfg = HydraConfig.get()
    experiment = hydra_cfg.runtime.choices.get("experiment")
    sweep = hydra_cfg.sweep.dir if hydra_cfg.mode == RunMode.MULTIRUN else None
    return (str(experiment) if experiment else None), sweep


def run_wandb_group(run: RunConfig) -> str | None:
    """Explicit ``group=``, else the sweep: its dir's last two parts (one sweep dir = one group,
    so every rerun or extension of that sweep lands in the same group)."""
    _, sweep = hydra_context()
    return group_rule(run.group, sweep)


JOB_TYPE_MAX = 64  # wandb refuses a longer job_type


def job_type(run: RunConfig, overrides: list[str] | None = None) -> str:
    """The variant without its seed, so that wandb's group-by averages seeds and never merges
    two settings: the run name without its ``-s<seed>`` part, followed by every override of the
    job (``overrides``, default Hydra's) that the name does not show, the seed and operational
    keys aside (``... warmup_steps=10``). Keys are shortened to their last part where that is
    unambiguous and numbers written short; past 64 characters the overrides that fit are kept
    whole and the rest become ``+N#digest`` (so two settings still differ), never a cut key."""
    name = run.name
    suffix = f"-s{run.seed}"
    base = name[: -len(suffix)] if name.endswith(suffix) else name
    items = short_overrides(unnamed(run, overrides))
    text = " ".join([base, *items])
    if len(text) <= JOB_TYPE_MAX:
        return text
    digest_len = 12  # " +NN#" and six hex digits
    if len(base) > JOB_TYPE_MAX - digest_len:  # a long custom name: its start and a digest
        return f"{text[: JOB_TYPE_MAX - 7]}#{hashlib.sha1(text.encode()).hexdigest()[:6]}"
    kept, rest = [base], []
    for item in items:
        fits = len(" ".join([*kept, item])) <= JOB_TYPE_MAX - digest_len
        (kept if fits and not rest else rest).append(item)
    digest = hashlib.sha1(" ".join(rest).encode()).hexdigest()[:6]
    return f"{' '.join(kept)} +{len(rest)}#{digest}"


def run_name(run: RunConfig, overrides: list[str] | None = None) -> str:
    """The run's name wherever it is shown (its header line, progress bar and wandb name): in
    a sweep, the ``name`` template with every key the sweep varies that the template does not
    show (``unnamed``) before its ``-s<seed>``, so no two runs of a sweep read alike
    (``gpt-pre-layernorm-L2-lr0.01-n_embd=64-param=mup-s0``); a single run's name as the
    template writes it."""
    if overrides is None and hydra_context()[1] is None:
        return run.name
    suffix = f"-s{run.seed}"
    seeded = run.name.endswith(suffix)
    base = run.name[: -len(suffix)] if seeded else run.name
    return "-".join([base, *short_overrides(unnamed(run, overrides))]) + suffix * seeded


def short_number(value: str) -> str:
    """``1.0e-03`` -> ``0.001``; integers and words stay as written."""
    if value.lstrip("-").isdigit():
        return value
    try:
        return f"{float(value):g}"
    except ValueError:
        return value


def short_overrides(items: list[str]) -> list[str]:
    """``trainer.max_steps=400`` as ``max_steps=400`` where no other override ends in the same
    last part; ``+``/``~`` dropped; numbers as ``%g`` (1.0e-03 -> 0.001)."""
    keys = [item.lstrip("+~").partition("=")[0] for item in items]
    lasts = [k.rsplit(".", 1)[-1] for k in keys]
    out = []
    for item, key, last in zip(items, keys, lasts, strict=True):
        value = short_number(item.partition("=")[2])
        out.append(f"{last if lasts.count(last) == 1 else key}={value}")
    return out


def unnamed(run: RunConfig, overrides: list[str] | None) -> list[str]:
    """The overrides whose keys the ``name`` template does not interpolate (a group choice
    ``placement=post`` is shown by ``${placement.name}``), without those every job of the
    sweep shares (its wandb group's)."""
    if overrides is None:
        from hydra.core.hydra_config import HydraConfig

        overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
        shared = set(recorded_constants(hydra_context()[1]).values())  # the group's own
        overrides = [item for item in overrides if item not in shared]
    template = str(OmegaConf.to_container(run.composed, resolve=False).get("name", ""))
    shown = set(re.findall(r"\$\{([\w.]+)\}", template))
    extra = []
    for item in overrides:
        key = item.lstrip("+~").partition("=")[0]
        if key in ("seed", "experiment") or key.startswith("hydra") or is_operational(key):
            continue
        if key not in shown and f"{key}.name" not in shown:
            extra.append(item)
    return sorted(extra)


def build_loggers(
    run: RunConfig,
    run_dir: Path,
    cut: tuple[int, int | None] = (0, None),
    wandb_id: str | None = None,
) -> tuple[list[Logger], dict[str, Any]]:
    """The loggers ``run.logger`` names, and what they add to the run's record (the wandb
    group the run joined, which scripts/compare.py reads back). A resumed run continues
    metrics.csv from its checkpoint's ``cut`` (training/reliability/metrics_csv.py) and the
    wandb run ``wandb_id``."""
    loggers: list[Logger] = []
    logged: dict[str, Any] = {}
    for key, args in run.logger.items():
        if key == "csv":
            loggers.append(ResumableCSVLogger(run_dir, cut=cut, **args))
        elif key == "wandb":
            logged["wandb_group"] = run_wandb_group(run)
            loggers.append(build_wandb(run, args, run_dir, wandb_id, logged["wandb_group"]))
        else:  # a `_target_` entry (the typed config refused any other)
            loggers.append(instantiate_logger(key, args, run_dir))
    return loggers, logged


def instantiate_logger(key: str, args: dict[str, Any], run_dir: Path) -> Logger:
    """A Lightning logger from its ``_target_`` entry, writing under the run dir."""
    from hydra.utils import instantiate

    try:
        return instantiate(args, save_dir=str(run_dir))
    except Exception as err:  # ImportError for a missing extra, TypeError for a bad argument
        cause = err.__cause__ or err
        raise LoggerError(
            f"logger.{key} ({args['_target_']}) cannot start: {type(cause).__name__}: "
            f"{str(cause).splitlines()[0] if str(cause) else ''}; install it with "
            "pip install -e '.[loggers]', or drop the logger"
        ) from err


def build_wandb(
    run: RunConfig, args: dict[str, Any], run_dir: Path, wandb_id: str | None, group: str | None
) -> WandbLogger:
    """The wandb run (see the module docstring): ``args`` are ``logger.wandb``'s, ``group``
    the one it is filed under."""
    w = dict(args)
    verbose = bool(w.pop("verbose", False))
    w.pop("log_model", None)  # finish_wandb uploads the final last.ckpt itself
    check_wandb_online(w.get("mode"))
    if not verbose:
        os.environ.setdefault("WANDB_SILENT", "true")
        os.environ.setdefault("WANDB_CONSOLE", "off")
    experiment, _ = hydra_context()
    config = OmegaConf.to_container(run.composed, resolve=True)
    config.pop("hydra", None)
    config["experiment"] = experiment
    config["group"] = group  # the group the run is filed under, as wandb shows it
    tags = [run.placement.name, run.norm.name, run.model_name, f"L{run.model.n_layer}"]
    tags += [f"experiment:{experiment}"] if experiment else []
    logger = WandbLogger(
        name=run_name(run),
        save_dir=str(run_dir),
        group=group,
        job_type=job_type(run),
        tags=tags,
        config=config,
        id=wandb_id,  # None: a new run; else continue that one (resume="allow")
        **w,
    )
    # Lightning passes anonymous=None, which wandb warns about on every run (wandb >= 0.19).
    logger._wandb_init.pop("anonymous", None)
    return logger


def define_wandb_metrics(run: Any) -> None:
    """Step axis, panel sections and run-table summaries (see the module docstring)."""
    run.define_metric(STEP_AXIS)
    for section in SECTIONS:
        run.define_metric(f"{section}/*", step_metric=STEP_AXIS)
    run.define_metric("lr", step_metric=STEP_AXIS, summary="max")  # the run table: peak lr
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
    multirun starts its own). A process that never imported wandb has no run to close (and
    may have no wandb: a bare GPU machine with logger=csv)."""
    wandb = sys.modules.get("wandb")
    if wandb is None or wandb.run is None:
        return
    if summary is not None:
        wandb.run.summary.update({k: summary[k] for k in SUMMARY_FIELDS if k in summary})
        if summary.get("derived"):  # computed by the model: alpha, beta, Admin's omegas
            wandb.run.config.update({"derived": summary["derived"]}, allow_val_change=True)
        config = getattr(wandb.run, "config", None) or {}
        log_model = config.get("logger", {}).get("wandb", {}).get("log_model")
        ckpt = Path(summary.get("run_dir") or ".") / CHECKPOINT
        if log_model and summary.get("status") == "completed" and ckpt.is_file():
            artifact = wandb.Artifact(f"model-{wandb.run.id}", type="model", metadata=summary)
            artifact.add_file(str(ckpt))
            wandb.run.log_artifact(artifact, aliases=["last"])
    wandb.finish(exit_code=0 if summary is None or summary.get("status") != "failed" else 1)


def wandb_run_id(run_dir: Path) -> str | None:
    """The id of the latest wandb run in ``run_dir`` (``<mode>-run-<time>-<id>`` dirs), which a
    resumed attempt continues."""
    runs = sorted(p.name for p in (run_dir / "wandb").glob("*run-*-*") if p.is_dir())
    return runs[-1].rsplit("-", 1)[-1] if runs else None
