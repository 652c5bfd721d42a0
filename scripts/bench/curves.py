"""Validation loss of train.py runs against optimizer steps and against estimated seconds.

    python -m scripts.bench curves --out docs/figures/default_job.png --target 1.6 \\
        --run "old default=outputs/old-s0@0.476" --run "new default=outputs/new-s0@0.14"

Each ``--run LABEL=RUN_DIR@SECONDS_PER_STEP`` reads ``RUN_DIR/metrics.csv``; runs that share a
label (seeds) share a colour. The right panel puts each validation at ``--startup`` plus its step
times the run's seconds per step: a time estimate for a machine whose step times were measured
elsewhere (docs/benchmarks.md says which), not a clock reading of these runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from analysis.runs import run_series
from runs import runfiles
from runs.record import read_summary


def val_curve(run_dir: Path) -> tuple[list[int], list[float]]:
    """(steps, val losses) from a run's metrics.csv."""
    series = run_series(run_dir, "val/loss")
    return [s for s, _ in series], [v for _, v in series]


def seed_of(run_dir: Path) -> str:
    """``seed N`` from the run's summary.json, else the run dir's name."""
    seed = (read_summary(run_dir / runfiles.SUMMARY) or {}).get("seed")
    return run_dir.name if seed is None else f"seed {seed}"


def parse_run(text: str) -> tuple[str, Path, float]:
    try:
        label, rest = text.split("=", 1)
        path, seconds = rest.rsplit("@", 1)
        return label, Path(path), float(seconds)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--run takes LABEL=RUN_DIR@SECONDS_PER_STEP, got {text!r}"
        ) from None


def plot(runs: list[tuple[str, Path, float]], out: Path, startup: float, target: float | None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    colours: dict[str, str] = {}
    for label, run_dir, seconds in runs:
        steps, losses = val_curve(run_dir)
        first = label not in colours
        colours.setdefault(label, f"C{len(colours)}")
        style = dict(color=colours[label], marker="o", ms=3, lw=1.5 if first else 1.0)
        style["ls"] = "-" if first else "--"
        name = f"{label}, {seed_of(run_dir)}"
        by_step.plot(steps, losses, label=name, **style)
        by_time.plot([startup + s * seconds for s in steps], losses, label=name, **style)
    for ax in (by_step, by_time):
        if target is not None:
            ax.axhline(target, color="grey", lw=0.8, ls=":")
        ax.grid(alpha=0.3)
    by_step.set_xlabel("optimizer step")
    start = f"{startup:g} s startup + " if startup else ""
    by_time.set_xlabel(f"estimated seconds ({start}step x the run's seconds per step)")
    by_step.set_ylabel("validation loss (nats/char)")
    by_time.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m scripts.bench curves", description=__doc__)
    p.add_argument("--run", type=parse_run, action="append", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--startup", type=float, default=0.0, help="seconds before the first step")
    p.add_argument("--target", type=float, default=None, help="a dotted line at this loss")
    args = p.parse_args(argv)
    plot(args.run, args.out, args.startup, args.target)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
