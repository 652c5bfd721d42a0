"""Sweep dir -> table and plots: ``python scripts/compare.py SWEEP_DIR [--out DIR]``.

Writes SWEEP_DIR/report/ (report.md, report.json, report.html, plots; analysis/report.py) and
prints the table, the wandb group to open and the command that uploads offline wandb runs.
When the runs logged to wandb, the report joins their group as a run of its own (job_type
"report": the files as an artifact, the plots and the table; analysis/wandb_report.py);
--no-wandb skips it.

    python scripts/compare.py SWEEP --x optim.lr --y best_val_loss
    python scripts/compare.py SWEEP --x optim.lr --y max:attn/max_logit,final_val_loss

draws one swept key against run results (analysis/xy.py: seed mean ± std per variant) into
the report dir.

    python scripts/compare.py SWEEP --baseline model.connection=residual [--margin 0.02]

gives each other variant's difference from the baseline at each one's stable best lr, with its
95% interval (paired by seed where the arms share an init), Holm over the pairs, the seeds per
arm a decision at the margin needs, and the rates of runs that did not train (Fisher).

    python scripts/compare.py SWEEP --claim 'connection=hc - connection=residual < 0'
    python scripts/compare.py SWEEP --claims claims.yaml [--freeze | --confirm]

decides a researcher's own claims with the findings' judge (analysis/claims.py has the form),
freezes them (hash, seeds sized on this pilot, fresh seeds) and confirms them on the fresh seeds
(experiments/claims.py): report/claims.md and claims.json.
"""

from __future__ import annotations

import sys  # noqa: I001
from pathlib import Path

# This checkout's packages, never an installed copy of another (python scripts/x.py puts
# scripts/ first on sys.path, not the checkout).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json

from analysis import claims as user
from analysis import lr_sweep
from analysis.report import markdown_table, md_table, table_cells, write_report, xy_figure
from analysis.wandb_report import log_report
from experiments import claims as protocol_claims
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
        "--no-wandb", action="store_true", help="no wandb run for the report, when runs logged"
    )
    parser.add_argument("--x", help="a swept config key to plot against, e.g. optim.lr")
    parser.add_argument(
        "--y", default="best_val_loss", help="run results (comma list), e.g. best_val_loss"
    )
    parser.add_argument("--baseline", help="KEY=VALUE[,KEY=VALUE]: each variant against it")
    parser.add_argument(
        "--margin", type=float, default=0.0, help="--baseline: a difference within ±MARGIN is none"
    )
    parser.add_argument("--measure", default="best_val_loss", help="--baseline's per-run measure")
    parser.add_argument("--claims", type=Path, help="a claim file (analysis/claims.py)")
    parser.add_argument(
        "--claim", action="append", default=[], help="'[id:] [measure:] k=v - k=v < margin'"
    )
    protocol = parser.add_mutually_exclusive_group()
    protocol.add_argument("--freeze", action="store_true", help="freeze the claims (pilot: this)")
    protocol.add_argument("--confirm", action="store_true", help="run the frozen claims' seeds")
    args = parser.parse_args(argv)
    if (args.freeze or args.confirm) and not (args.claims or args.claim):
        raise ConfigError("--freeze and --confirm act on claims: add --claims FILE or --claim")
    out_dir = args.out or args.sweep_dir / "report"
    if args.confirm:  # the fresh seeds first: the report below holds them
        code = confirm(args)
        if code:
            return code
    report = write_report(args.sweep_dir, args.out, plots=not args.no_plots, logy=args.logy)
    if report["lr_sweep"]:  # the sweep's answer: the ranking at each variant's best rate
        print("\n".join(lr_sweep.markdown(report["lr_sweep"])[4:]).strip())
    else:
        print(markdown_table(report) if report["variants"] else "no runs found")
    print(f"\nreport: {out_dir / 'report.md'} ({len(report['plots'])} plots)")
    if args.x:
        print(f"figure: {xy_figure(args.sweep_dir, args.x, args.y.split(','), out_dir)}")
    if report["wandb"] or report["wandb_sync"]:  # the runs logged to wandb: where to look
        project = (report["wandb"] or {}).get("project", "normlab")
        groups = ", ".join(report["wandb_groups"])
        none = f"wandb (project {project}): these runs are in no group; find them by name"
        print(f"wandb group to open (project {project}): {groups}" if groups else none)
    if report["wandb_sync"]:
        print(f"upload offline runs: wandb sync {report['wandb_sync']}")
    else:  # logger=csv, or wandb disabled
        print(
            "no offline wandb runs here; with wandb logging on, upload them later with "
            "`wandb sync <run_dir>/wandb/offline-run-*`"
        )
    if report["wandb"] and not args.no_wandb:
        print(log_report(report, out_dir, table_cells(report)))
    if args.baseline:
        print(write_section(out_dir, "comparisons", comparisons(report, args)))
    if args.claims or args.claim:
        entries = user.read_entries(args.claims, args.claim)
        if args.freeze:
            record = protocol_claims.freeze(args.sweep_dir, report, entries)
            where = args.sweep_dir / protocol_claims.FROZEN
            print(
                f"frozen: {', '.join(record['claims'])} in {where} ({record['seeds']} fresh "
                f"seeds per arm from seed {record['first_seed']}); "
                "confirm with the same command and --confirm"
            )
        print(write_section(out_dir, "claims", decide_claims(report, entries, args.sweep_dir)))
    return 0


def comparisons(report: dict, args: argparse.Namespace) -> tuple[str, tuple, dict]:
    """``--baseline``'s table (markdown) and record."""
    table = user.user_table(report, {args.measure})
    losses, rates = user.baseline_claims(table["rows"], args.baseline, args.margin, args.measure)
    loss_v, rate_v = user.decide(losses, table), user.decide(rates, table)
    cells = user.comparison_cells(loss_v, rate_v, losses, args.margin)
    text = (
        f"## Against the baseline {args.baseline}\n\n{args.measure}: each variant minus the "
        f"baseline at its other keys' values, each at its stable best lr; decision at margin "
        f"{args.margin:g} after Holm over the {len(losses)} pairs (and over the rate tests)."
    )
    return text, cells, {"baseline": args.baseline, "margin": args.margin, "table": table,
                  "differences": loss_v, "rates": rate_v}  # fmt: skip


def decide_claims(report: dict, entries: list[dict], sweep_dir: Path) -> tuple[str, tuple, dict]:
    """The claims' verdicts (markdown) and record (its per-run table: recomputable)."""
    frozen = protocol_claims.read_frozen(sweep_dir)
    table, verdicts = protocol_claims.judge(report, entries, frozen)
    said = "frozen " + frozen["date"] if frozen else "not frozen: exploratory"
    return f"## Claims ({said})", user.claim_cells(verdicts), {
        "frozen": frozen, "table": table, "claims": verdicts}  # fmt: skip


def write_section(out_dir: Path, name: str, section: tuple[str, tuple, dict]) -> str:
    """``name``.md and ``name``.json in the report dir; the same as plain text, to print."""
    intro, (head, cells), record = section
    (out_dir / f"{name}.md").write_text(f"{intro}\n\n{md_table(head, cells)}\n")
    (out_dir / f"{name}.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    lines = [" | ".join(head), *(" | ".join(row) for row in cells)]
    return "\n".join(["", intro.lstrip("# "), "", *lines, "", f"({out_dir / (name + '.md')})"])


def confirm(args: argparse.Namespace) -> int:
    """The frozen claims' confirming launches (experiments/claims.py)."""
    frozen = protocol_claims.read_frozen(args.sweep_dir)
    if frozen is None:
        raise ConfigError(f"nothing frozen in {args.sweep_dir}; freeze the claims first (--freeze)")
    report = write_report(args.sweep_dir, args.out, plots=False)
    entries = user.read_entries(args.claims, args.claim)
    table = user.user_table(report, user.measures_of(entries))
    claims = protocol_claims.declared(entries, table["rows"], frozen)
    seeds = protocol_claims.fresh(frozen)
    return protocol_claims.launch(
        args.sweep_dir, protocol_claims.launches(claims, table, report, seeds)
    )


if __name__ == "__main__":
    sys.exit(main())
