"""summary.json's fields, each declared once: its JSON type, what it means, whether the wandb run
table shows it, and the metrics.csv column (and reduction) a reader falls back to when an older
record lacks it.

The run record (runs/record.py: RunRecord.write) is the only writer of summary.json and
``read_summary`` its only reader; FIELDS is what they carry. Every field a run records is here
(tests/training/test_summary.py holds the runs' summaries to it), the wandb run table
(training/loggers.py) and the report's result columns (analysis/runs.py) derive their lists from
it. A record written before a field existed still reads: the field is then absent, and a reader
with a ``metric`` recovers it from the run's metrics.csv. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runs.checks import type_name, type_ok

JSON = dict[str, Any]
Number = int | float


@dataclass(frozen=True)
class Field:
    type: Any  # the JSON value's type hint; null is always allowed (a measurement not taken)
    meaning: str
    wandb: bool = False  # copied into the wandb run's summary table
    # (metrics.csv column, reduction: min | max | last | mean; "*" pools matching columns): where
    # a reader finds the value when a record lacks it
    metric: tuple[str, str] | None = None
    probe: bool = False  # a stability probe's per-run scalar (a report column of its own)


FIELDS: dict[str, Field] = {
    # --- the outcome (runs/record.py) ---
    "status": Field(str, "completed | diverged | interrupted | failed", wandb=True),
    "diverged_at_step": Field(int | None, "the optimizer step the run diverged at", wandb=True),
    "divergence_reason": Field(str | None, "why it diverged (non-finite loss, loss x factor)"),
    "interrupted_by": Field(int | None, "the signal that stopped it (15: SIGTERM, 2: SIGINT)"),
    "error": Field(str, "what failed: the exception's type and message"),
    "did_not_train": Field(
        str | None, "why a completed run learned nothing a loss shows, or null", wandb=True
    ),
    # --- what the run is (training/attempt.py: initial_results) ---
    "name": Field(str, "the variant's name (wandb run name, sweep dir suffix)"),
    "run_dir": Field(str, "this run's directory"),
    "model": Field(str, "model.name: gpt | vit"),
    "placement": Field(str, "placement.name (init probe: the probed placements, comma-separated)"),
    "norm": Field(str, "norm.name"),
    "n_layer": Field(int, "blocks"),
    "n_embd": Field(int, "width"),
    "lr": Field(Number, "the peak learning rate", wandb=True),
    "warmup_steps": Field(int, "linear warmup steps as run (a too-long one clamped)"),
    "seed": Field(int, "the run's seed"),
    "code_version": Field(
        str, "a digest of the code that ran (models, data, runs, training, train.py)"
    ),
    "run_config": Field(JSON, "every setting that decides the result, flattened (the fingerprint)"),
    "threads": Field(int, "torch CPU threads the run used"),
    "wall_s": Field(Number | None, "seconds from the run dir's opening to its close"),
    "wandb_group": Field(str | None, "the wandb group its run joined"),
    # --- the data and the model (training/fit.py: built_results) ---
    "params": Field(int | None, "trainable parameters"),
    "resumed_from_step": Field(int | None, "the step a resume started from, or null"),
    "lossy_tokenizer": Field(bool, "the tokenizer cannot round-trip the corpus (bpb is then off)"),
    "unigram_loss": Field(Number, "text: the loss of the train split's token frequencies"),
    "chance_loss": Field(Number, "images: log of the classes"),
    # --- the fit (training/fit.py, each task's results()) ---
    "steps": Field(int, "optimizer steps trained (a diverged run: the healthy ones)", wandb=True),
    "precision": Field(str, "Lightning's resolved precision"),
    "init_loss": Field(Number | None, "the first training step's loss"),
    "final_train_loss": Field(
        Number | None, "the last logged train loss", metric=("train/loss", "last")
    ),
    "final_val_loss": Field(
        Number | None, "the last validation loss", wandb=True, metric=("val/loss", "last")
    ),
    "best_val_loss": Field(
        Number | None, "the lowest validation loss", wandb=True, metric=("val/loss", "min")
    ),
    "final_val_bpb": Field(Number | None, "text: the last validation bits per byte", wandb=True),
    "best_val_bpb": Field(Number | None, "text: the lowest validation bits per byte", wandb=True),
    "final_val_acc": Field(Number | None, "images: the last validation accuracy", wandb=True),
    "best_val_acc": Field(
        Number | None, "images: the best validation accuracy", wandb=True, metric=("val/acc", "max")
    ),
    "tokens_per_s": Field(
        Number | None, "text: training throughput", metric=("throughput/tokens_per_s", "mean")
    ),
    "samples_per_s": Field(
        Number | None, "images: training throughput", metric=("throughput/samples_per_s", "mean")
    ),
    "flops_per_token": Field(int, "text: training FLOPs a token (models/flops.py)"),
    "flops_per_sample": Field(int, "images: training FLOPs an image"),
    "peak_flops": Field(Number, "the peak MFU is measured against (FLOP/s)"),
    "peak_flops_source": Field(str, "where that peak comes from"),
    "mfu": Field(Number | None, "model FLOPs utilization"),
    "derived": Field(
        JSON, "constants the model derived: DeepNorm's alpha and beta, Admin's omegas"
    ),
    "fused_rmsnorm": Field(bool | None, "whether RMSNorm ran through the fused CPU kernel"),
    # --- the stability probes' per-run scalars (training/probes/) ---
    "loss_spikes": Field(
        int,
        "train losses above spike_factor x their running median",
        wandb=True,
        metric=("train/loss_spikes", "max"),
        probe=True,
    ),  # fmt: skip
    "skipped_steps": Field(int, "optim.guards skip_step: optimizer steps not taken"),
    "clipped_updates": Field(int, "optim.guards clip_update: updates scaled down"),
    "zclipped_steps": Field(int, "optim.guards zclip: steps whose gradients were scaled down"),
    "spike_steps_loss": Field(int, "spike_score: steps whose loss scored above probes.spike_sigma"),
    "spike_steps_grad": Field(
        int, "spike_score: steps whose gradient norm scored above probes.spike_sigma"
    ),
    "final_sharpness": Field(
        Number, "the last Hessian top eigenvalue", metric=("sharpness/hessian", "last"), probe=True
    ),
    "min_attn_entropy": Field(
        Number,
        "the lowest head's mean attention entropy over layers and steps",
        metric=("attn/entropy_min/layer_*", "min"),
        probe=True,
    ),  # fmt: skip
    # --- an init-probe run (scripts/init_probe.py; training/init_probe.py) ---
    "finding": Field(str, "init probe: the finding it measures (F1)"),
    "config": Field(JSON, "init probe: the probed model config"),
    "placements": Field(list[Any], "init probe: the placements probed"),
    "depths": Field(list[Any], "init probe: the depths probed"),
    "seeds": Field(list[Any], "init probe: the seeds probed"),
    "k_batches": Field(int, "init probe: train batches a seed"),
    "batch_shape": Field(list[Any], "init probe: a batch's shape"),
    "depth_slopes": Field(JSON, "init probe: log-log slope of each measure against depth"),
    "runs": Field(list[Any], "init probe: every placement x depth x seed's measures"),
}


def wandb_fields() -> tuple[str, ...]:
    """The fields the wandb run table shows."""
    return tuple(name for name, f in FIELDS.items() if f.wandb)


def metric_fields(probe: bool | None = None) -> dict[str, tuple[str, str]]:
    """{field: (metrics.csv column, reduction)} for the fields a reader can recover from
    metrics.csv (``probe``: only the probes' scalars, or only the others)."""
    return {
        name: f.metric
        for name, f in FIELDS.items()
        if f.metric is not None and (probe is None or f.probe == probe)
    }


def problems(summary: JSON) -> list[str]:
    """What in a summary.json is not as FIELDS declares it: undeclared fields, values of
    another type; empty for a well-formed record."""
    out = []
    for name, value in summary.items():
        field = FIELDS.get(name)
        if field is None:
            out.append(f"{name}: not a declared summary field (runs/summary.py)")
        elif value is not None and not type_ok(value, field.type):
            out.append(f"{name}={value!r}: not of type {type_name(field.type)}")
    return out
