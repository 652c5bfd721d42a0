"""Evaluate a run's checkpoint on its validation set: the same batches its training validated on.

    python -m scripts.evaluate outputs/2026-12-01/12-00-00              # last.ckpt, GPT or ViT
    python -m scripts.evaluate <run_dir> --ckpt <run_dir>/checkpoints/superseded-<time>/last.ckpt

The checkpoint rebuilds the model (its saved hyperparameters); the run's .hydra/config.yaml
rebuilds the data, so the validation set is the run's own (fixed windows of the text, the
image set's val split). Prints val/loss and, where the task has them, val/acc (ViT) and val/bpb
(GPT); ``--json`` prints them as one JSON object. A completed run's last.ckpt gives back the
final validation of its summary.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a file: make the project root importable
    sys.path.insert(0, str(ROOT))

CONFIG = Path(".hydra") / "config.yaml"


def run_config(run_dir: Path):
    """The run's resolved config; ``run_dir`` stands in for Hydra's output dir."""
    from omegaconf import OmegaConf

    path = run_dir / CONFIG
    if not path.is_file():
        raise SystemExit(f"error: {path} does not exist; pass a run directory train.py wrote")
    cfg = OmegaConf.load(path)
    cfg.run_dir = str(run_dir)
    return cfg


def evaluate(run_dir: Path, ckpt: Path | None = None, threads: int | None = None) -> dict:
    """{"val/loss": ..., ["val/acc" | "val/bpb"]: ...} of ``ckpt`` (default last.ckpt)."""
    import lightning.pytorch as L

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # no device lines, no tips

    from training.build import build_data, model_spec, set_threads

    ckpt = ckpt or run_dir / "last.ckpt"
    if not ckpt.is_file():
        raise SystemExit(
            f"error: {ckpt} does not exist; pass a run dir with a last.ckpt, or --ckpt"
        )
    cfg = run_config(run_dir)
    set_threads(threads if threads is not None else cfg.get("num_threads"))
    spec = model_spec(cfg)
    dm = build_data(cfg, spec)
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
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--ckpt", type=Path, default=None, help="default: <run_dir>/last.ckpt")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: the run's)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    metrics = evaluate(args.run_dir, args.ckpt, args.threads)
    if args.json:
        print(json.dumps(metrics))
    else:
        print(
            " ".join(f"{k}={v:.4f}" for k, v in metrics.items()), f"ckpt={args.ckpt or 'last.ckpt'}"
        )
    return metrics


if __name__ == "__main__":
    main()
