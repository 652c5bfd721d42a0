"""Sweep dir -> table and plots: ``python scripts/compare.py SWEEP_DIR [--out DIR]``.

Writes SWEEP_DIR/report/ (report.md, report.json, plots; analysis/report.py) and prints
the table, the wandb group to open and the command that uploads offline wandb runs. When the
runs logged to wandb, the report joins their group as a run of its own (job_type "report": the
files as an artifact, the plots and the table; analysis/wandb_report.py); --no-wandb
skips it.

    python scripts/compare.py SWEEP --x optim.lr --y best_val_loss
    python scripts/compare.py SWEEP --x data.batch_size --y best_val_acc
    python scripts/compare.py SWEEP --x optim.lr --y max:attn/max_logit,final_val_loss

also draws one swept key against run results (analysis/xy.py: seed mean ± std per
variant) into the report dir.
"""

from __future__ import annotations

import sys  # noqa: I001
from pathlib import Path

# This checkout's packages, never an installed copy of another (python scripts/x.py puts
# scripts/ first on sys.path, not the checkout).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse

from analysis import lr_sweep
from analysis.report import markdown_table, table_cells, write_report, xy_figure
from analysis.wandb_report import log_report
from runs.errors import ConfigError


def main(argv: list[str] | None = None) -> int:
    """The report, or ``error: <one line>`` and exit status 1 for bad input."""
    try:
        return report_command(argv)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 1


def report_command(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="a Hydra multirun dir, or any dir of runs")
    parser.add_argument(
        "--out", type=Path, default=None, help="report dir (default SWEEP_DIR/report)"
    )
    parser.add_argument("--no-plots", action="store_true", help="write the tables only")
    parser.add_argument("--logy", action="store_true", help="loss curves on a log axis")
    parser.add_argument(
        "--no-wandb", action="store_true", help="no wandb run for the report (see below)"
    )
    parser.add_argument("--x", help="a swept config key to plot against, e.g. optim.lr")
    parser.add_argument(
        "--y", default="best_val_loss", help="run results (comma list), e.g. best_val_loss"
    )
    args = parser.parse_args(argv)
    report = write_report(args.sweep_dir, args.out, plots=not args.no_plots, logy=args.logy)
    out_dir = args.out or args.sweep_dir / "report"
    if report["lr_sweep"]:  # the sweep's answer: the ranking at each variant's best rate
        print("\n".join(lr_sweep.markdown(report["lr_sweep"])[4:]).strip())
    else:
        print(markdown_table(report) if report["variants"] else "no runs found")
    print(f"\nreport: {out_dir / 'report.md'} ({len(report['plots'])} plots)")
    if args.x:
        print(f"figure: {xy_figure(args.sweep_dir, args.x, args.y.split(','), out_dir)}")
    if report["wandb"] or report["wandb_sync"]:  # the runs logged to wandb: where to look
        project = (report["wandb"] or {}).get("project", "normlab")
        print(f"wandb group to open (project {project}): {', '.join(report['wandb_groups'])}")
    if report["wandb_sync"]:
        print(f"upload offline runs: wandb sync {report['wandb_sync']}")
    else:  # logger=csv, or wandb disabled
        print(
            "no offline wandb runs here; with wandb logging on, upload them later with "
            "`wandb sync <run_dir>/wandb/offline-run-*`"
        )
    if report["wandb"] and not args.no_wandb:
        print(log_report(report, out_dir, table_cells(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
