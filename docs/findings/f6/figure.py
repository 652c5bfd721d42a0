"""F6's figure from a finished sweep: max attention logit and capped final loss against the
learning rate, QK-norm off and on (mean over seeds, one dot per run).

    python docs/findings/f6/figure.py multirun/reproduce/f6_lr_sensitivity docs/findings/f6
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from scripts.analysis.findings.lr import QK, capped_loss, run_series  # noqa: E402


def main(sweep: Path, out: Path) -> None:
    report = json.loads((sweep / "report" / "report.json").read_text())
    fig, (ax_logit, ax_loss) = plt.subplots(1, 2, figsize=(9, 3.6), layout="constrained")
    for qk, color in ((False, "tab:red"), (True, "tab:blue")):
        rows = sorted(
            (r for r in report["variants"] if r["params"].get(QK) == qk),
            key=lambda r: r["params"]["lr"],
        )
        lrs, logit_means, loss_means = [], [], []
        for row in rows:
            lr = row["params"]["lr"]
            peaks = [
                max(y for _, y in s) for r in row["runs"] if (s := run_series(r, "attn/max_logit"))
            ]
            losses = [x for r in row["runs"] if (x := capped_loss(r)) is not None]
            ax_logit.scatter([lr] * len(peaks), peaks, color=color, s=10, alpha=0.5)
            ax_loss.scatter([lr] * len(losses), losses, color=color, s=10, alpha=0.5)
            lrs.append(lr)
            logit_means.append(sum(peaks) / len(peaks))
            loss_means.append(sum(losses) / len(losses))
        label = "QK-norm" if qk else "no QK-norm"
        ax_logit.plot(lrs, logit_means, "o-", color=color, label=label)
        ax_loss.plot(lrs, loss_means, "o-", color=color, label=label)
    for ax in (ax_logit, ax_loss):
        ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        ax.grid(alpha=0.3)
    ax_logit.set_yscale("log")
    ax_logit.set_ylabel("max attention logit (max over steps)")
    ax_loss.set_ylabel("min(final val loss, initial loss)")
    ax_logit.legend()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "lr_sweep.png", dpi=110)
    print(out / "lr_sweep.png")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
