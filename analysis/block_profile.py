"""What each block of a run does to the residual stream at its last probe (F9, Sun et al. 2025).

Read from the run's metrics.csv, as the probes logged them on the fixed probe batch
(training/probes/measures.py): for block i with input x and output h,

    block_cos/layer_{i}   mean over positions of cos(x, h)   near 1: the block barely changes x
    act_norm/layer_{i}    sqrt(mean(h^2))                     the stream's scale after block i

``last_profile`` gives both per block at the last step where every block was probed; F9's claims
read it, and ``plot_profiles`` draws it for a sweep (report/block_profile.png):

    python -m analysis.block_profile multirun/reproduce/f9_depth_curse
"""

from __future__ import annotations

import json
from pathlib import Path

from analysis.runs import run_series
from runs import metric_names as names


def last_profile(run_dir: str | Path, n_layer: int) -> dict[str, list[float]] | None:
    """{"cos": [...], "rms": [...]} per block at the run's last probe step that has every
    block of both; None when the run logged neither probe."""
    series = {
        key: [dict(run_series(run_dir, names.per_layer(prefix, i))) for i in range(n_layer)]
        for key, prefix in (("cos", names.BLOCK_COS), ("rms", names.ACT_NORM))
    }
    steps = set.intersection(*(set(s) for per in series.values() for s in per))
    if not steps:
        return None
    last = max(steps)
    return {key: [s[last] for s in per] for key, per in series.items()} | {"step": last}


def plot_profiles(sweep_dir: Path) -> Path:
    """report/block_profile.png of a reported sweep: per variant, the mean over its completed
    runs of each block's 1 - cosine (log scale: how much it changes its input) and output RMS
    against the block's depth, at the last probe."""
    import matplotlib

    matplotlib.use("Agg")  # files only
    import matplotlib.pyplot as plt

    report = json.loads((sweep_dir / "report" / "report.json").read_text())
    fig, (ax_cos, ax_rms) = plt.subplots(1, 2, figsize=(10, 4))
    for row in report["variants"]:
        n_layer = int(row["params"]["n_layer"])
        runs = [r for r in row["runs"] if r["status"] == "completed"]
        found = [p for p in (last_profile(r["run_dir"], n_layer) for r in runs) if p]
        if not found:
            continue
        layers = range(1, n_layer + 1)
        label = f"{row['label']} (n={len(found)}, step {found[0]['step']})"
        cos = [sum(p["cos"][i] for p in found) / len(found) for i in range(n_layer)]
        rms = [sum(p["rms"][i] for p in found) / len(found) for i in range(n_layer)]
        ax_cos.plot(layers, [1 - c for c in cos], marker=".", label=label)
        ax_rms.plot(layers, rms, marker=".", label=label)
    ax_cos.set_yscale("log")
    ax_cos.set(xlabel="block l", ylabel="1 - mean cos(input, output)", title="what block l changes")
    ax_rms.set(xlabel="block l", ylabel="RMS of the stream after block l", title="stream scale")
    ax_cos.legend(fontsize=7)
    fig.tight_layout()
    path = sweep_dir / "report" / "block_profile.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


if __name__ == "__main__":  # python -m analysis.block_profile SWEEP_DIR
    import sys

    print(plot_profiles(Path(sys.argv[1])))
