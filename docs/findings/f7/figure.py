"""F7's figure from a finished sweep: best val accuracy against the batch size for each norm
(mean over seeds, one dot per run; every run saw the same number of images).

    python docs/findings/f7/figure.py multirun/reproduce/f7_batch_stats docs/findings/f7
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

BATCH = "data.batch_size"
COLORS = {"batchnorm": "tab:red", "layernorm": "tab:blue", "rmsnorm": "tab:green"}


def main(sweep: Path, out: Path) -> None:
    report = json.loads((sweep / "report" / "report.json").read_text())
    fig, ax = plt.subplots(figsize=(5, 3.6), layout="constrained")
    for norm, color in COLORS.items():
        rows = sorted(
            (r for r in report["variants"] if r["params"]["norm"] == norm),
            key=lambda r: r["params"][BATCH],
        )
        batches, means = [], []
        for row in rows:
            accs = [r["best_val_acc"] or 0.0 for r in row["runs"]]
            ax.scatter([row["params"][BATCH]] * len(accs), accs, color=color, s=10, alpha=0.5)
            batches.append(row["params"][BATCH])
            means.append(sum(accs) / len(accs))
        ax.plot(batches, means, "o-", color=color, label=norm)
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.set_xlabel("batch size (equal epochs)")
    ax.set_ylabel("best val accuracy")
    ax.grid(alpha=0.3)
    ax.legend()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "acc_vs_batch.png", dpi=110)
    print(out / "acc_vs_batch.png")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
