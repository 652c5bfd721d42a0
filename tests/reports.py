"""Hand-made report.json pieces for the verdict tests (scripts/analysis/findings reads these)."""

from __future__ import annotations


def seed_runs(values: list[float | None], metric: str = "best_val_loss") -> list[dict]:
    """One report.json run per value, seed = position; None is a diverged run."""
    return [
        {
            "run_dir": "-",
            "seed": i,
            "status": "diverged" if x is None else "completed",
            metric: x,
        }
        for i, x in enumerate(values)
    ]
