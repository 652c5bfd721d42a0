"""Evaluate a run's checkpoint on its validation set: the same batches its training validated on.

    python -m scripts.evaluate outputs/2026-12-01/12-00-00              # last.ckpt, GPT or ViT
    python -m scripts.evaluate <run_dir> --ckpt <run_dir>/checkpoints/superseded-<time>/last.ckpt

The checkpoint rebuilds the model (its saved hyperparameters) and the data: the settings it
recorded when it trained (block size, val windows, tokenizer, ...) override the run dir's
.hydra/config.yaml, which may be a later attempt's, so the validation set is the one this
checkpoint validated on (fixed windows of the text, the image set's val split). When the data
changed since (another corpus, images moved), a warning line says so. Prints val/loss and, where
the task has them, val/acc (ViT) and val/bpb (GPT); ``--json`` prints them as one JSON object.
A completed run's last.ckpt gives back the final validation of its summary.json. Bad input is
one ``error:`` line and exit code 1, as in train.py.
"""

from __future__ import annotations

import sys  # noqa: I001
from pathlib import Path

# This checkout's packages, never an installed copy of another (python scripts/x.py puts
# scripts/ first on sys.path, not the checkout).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import logging
import warnings

from runs import runfiles

CONFIG = runfiles.CONFIG


def run_config(run_dir: Path, recorded: dict | None = None):
    """The run's config with the settings a checkpoint ``recorded`` (flat dotted keys) put
    back; ``run_dir`` stands in for Hydra's output dir."""
    from omegaconf import OmegaConf

    from runs.errors import ConfigError

    path = run_dir / CONFIG
    if not path.is_file():
        raise ConfigError(f"{path} does not exist; pass a run directory train.py wrote")
    cfg = OmegaConf.load(path)
    cfg.run_dir = str(run_dir)
    for key, value in (recorded or {}).items():
        if OmegaConf.select(cfg, key, default=KeyError) is not KeyError:
            OmegaConf.update(cfg, key, value, merge=False)
    return cfg


def evaluate(run_dir: Path, ckpt: Path | None = None, threads: int | None = None) -> dict:
    """{"val/loss": ..., ["val/acc" | "val/bpb"]: ...} of ``ckpt`` (default last.ckpt). The
    run dir and the checkpoint are read before Lightning is imported: a wrong path fails in
    one line, in a second."""
    from runs.errors import ConfigError
    from training.reliability.checkpoints import read_checkpoint, resume_state

    ckpt = ckpt or run_dir / runfiles.CHECKPOINT
    if not (run_dir / CONFIG).is_file():
        raise ConfigError(f"{run_dir / CONFIG} does not exist; pass a run directory train.py wrote")
    if not ckpt.is_file():
        raise ConfigError(f"{ckpt} does not exist; pass a run dir with a last.ckpt, or --ckpt")
    recorded = resume_state(read_checkpoint(ckpt, "pass another checkpoint")).get("run_config")
    cfg = run_config(run_dir, recorded)

    import lightning.pytorch as L

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # no device lines, no tips

    from training.build import build_data
    from training.run_config import typed_config
    from training.threads import set_threads

    set_threads(threads if threads is not None else cfg.get("num_threads"))
    run = typed_config(cfg)
    spec = run.spec
    dm = build_data(run)
    trained_on, now = (recorded or {}).get("data.identity"), getattr(dm, "identity", None)
    if trained_on is not None and trained_on != now:
        print(
            f"warning: the data changed since {ckpt} trained (data.identity {trained_on} -> "
            f"{now}); these metrics are on today's data",
            file=sys.stderr,
        )
    task = spec.task.load_from_checkpoint(ckpt, map_location="cpu")
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*does not have many workers")
        trainer.validate(task, datamodule=dm, verbose=False)
    # The task reports its validation through the callback metrics (reduced sums, exact).
    metrics = trainer.callback_metrics
    return {k: float(v) for k, v in sorted(metrics.items()) if k.startswith("val/")}


def main(argv: list[str] | None = None) -> dict:
    from training.errors import script_errors

    return script_errors(evaluate_main)(argv)


def evaluate_main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path)
    ckpt_help = f"default: <run_dir>/{runfiles.CHECKPOINT}"
    p.add_argument("--ckpt", type=Path, default=None, help=ckpt_help)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: the run's)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    metrics = evaluate(args.run_dir, args.ckpt, args.threads)
    if args.json:
        print(json.dumps(metrics))
    else:
        print(
            " ".join(f"{k}={v:.4f}" for k, v in metrics.items()),
            f"ckpt={args.ckpt or runfiles.CHECKPOINT}",
        )
    return metrics


if __name__ == "__main__":
    main()
