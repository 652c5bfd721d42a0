"""Hand-made report.json pieces for the verdict tests (analysis/findings reads these)."""

from __future__ import annotations

from typing import Any

FAILED = "failed"  # a value that stands for a failed run (a config error, a crash)


def seed_runs(values: list[Any], metric: str = "best_val_loss") -> list[dict]:
    """One report.json run per value, seed = position; None is a diverged run, FAILED a failed
    one (neither has the metric)."""
    status = {None: "diverged", FAILED: "failed"}
    return [
        {
            "run_dir": "-",
            "seed": i,
            "status": status[x] if x is None or x == FAILED else "completed",
            metric: None if x == FAILED else x,
        }
        for i, x in enumerate(values)
    ]


def row(
    values: list[Any], params: dict[str, Any] | None = None, metric="best_val_loss", **more: Any
) -> dict:
    """A report.json variant with ``params`` and ``more``: one run per value (see seed_runs)."""
    params = {**(params or {}), **more}
    label = " ".join(f"{k}={v}" for k, v in params.items())
    runs = seed_runs(values, metric)
    return {"label": label, "params": params, "runs": runs, "throughput": {"mean": 100.0}}


def depth_report(losses: dict[tuple[str, int], list[Any]], **shared: Any) -> dict:
    """Variants by (placement, depth), each with ``shared`` params too."""
    return {
        "variants": [
            row(v, {"placement": p, "n_layer": d, **shared}) for (p, d), v in losses.items()
        ]
    }


def by_id(verdicts: list) -> dict:
    """Verdicts by claim id."""
    return {v.id: v for v in verdicts}
