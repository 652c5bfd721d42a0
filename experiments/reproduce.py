"""The reproduce command's flow (scripts/reproduce.py is its entry point): plan a finding's
sweep, claim its dir, launch it (then the confirming seeds), compare the runs, decide the
claims, write and publish the verdicts, and time it all; ``all`` runs every finding in turn."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from analysis.findings import (
    ALIASES,
    FINDINGS,
    Finding,
    confirm_lrs,
    decide_finding,
    fresh_seeds,
    hash_now,
    read_table,
)
from analysis.findings.declare import rule_text
from analysis.findings.settings import read_reproduce
from analysis.report import table_cells, write_report, xy_figure
from analysis.runs import load_runs
from analysis.wandb_report import log_report
from experiments import registry
from experiments.sweep import (
    ESTIMATE,
    ROOT,
    all_finished,
    arm_overrides,
    busy,
    claim_sweep_dir,
    compose,
    console,
    dir_constants,
    estimate_s,
    job_dirs,
    launch_overrides,
    planned_jobs,
    run_states,
    run_sweep,
    swept_values,
)
from experiments.verdicts import (
    Clock,
    counts,
    exit_status,
    extended,
    publish,
    read_verdict,
    show,
    verdict_stem,
    write_verdicts,
)
from runs.errors import ConfigError
from runs.record import FINISHED, Outcome, Status

SIZES = ("cpu", "gpu")
SWEEPS = ROOT / "multirun" / "reproduce"  # each finding's sweep dir, by default
TIMING = ("wall_s", "cpu_s", "cpus", "load_start", "load_end", "launches")


# --- entry ---------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/reproduce.py",
        description="One command per finding: run its sweep, compare the runs, decide each "
        "published claim.",
    )
    p.add_argument("finding", nargs="?", choices=sorted([*FINDINGS, *ALIASES, "all"]))
    p.add_argument("--size", choices=SIZES, default="cpu")
    p.add_argument("--out", type=Path, help="sweep dir (default multirun/reproduce/<experiment>)")
    p.add_argument(
        "--dry-run", action="store_true", help="show the sweep and the claims; run nothing"
    )
    p.add_argument("--publish", type=Path, help="copy verdict, report and key plots here")
    p.add_argument(
        "--recompute",
        type=Path,
        nargs="+",
        metavar="DIR",
        help="decide every verdict again from these verdict.json files (or dirs holding one) "
        "and say whether each is identical",
    )
    p.add_argument(
        "--rejudge",
        action="store_true",
        help="with --recompute: write back each file's verdicts as decided again from its own "
        "table (after a change of the judge's rules; each verdict word it changes needs its "
        "ledger entry, docs/findings/ledger.json)",
    )
    p.add_argument("overrides", nargs="*", help="Hydra overrides for every run, e.g. seed=0,1,2")
    p.add_argument(
        "--ladder",
        action="store_true",
        help="run the finding at each size of its "
        "reproduce.ladder, then each effect's trend over size (experiments/ladder.py)",
    )
    p.add_argument("--rung", action="store_true", help=argparse.SUPPRESS)  # one ladder rung
    p.add_argument(
        "--freeze",
        nargs="*",
        metavar="FINDING",
        help="freeze the registry: record each claim's hash and the fresh seeds the "
        "confirmatory runs take (analysis/findings/frozen.json); with findings named, only "
        "theirs (the others stay as the last freeze left them)",
    )
    args = p.parse_intermixed_args(argv)
    if sum([args.finding is not None, args.recompute is not None, args.freeze is not None]) != 1:
        p.error("name a finding (or all), or --recompute DIR..., or --freeze")
    if args.rejudge and not args.recompute:
        p.error("--rejudge writes what --recompute decides: --recompute DIR... --rejudge")
    return args


@dataclass
class Sweep:
    """One finding's sweep: its composed config, its launches' jobs and their run dirs."""

    name: str
    finding: Finding
    experiment: str
    out: Path
    cfg: Any
    launches: list[tuple[list[str], list[list[str]]]]  # (overrides, jobs) per launch
    command: str
    exploratory: str | None = None  # why its runs are not those the freeze covers

    @property
    def jobs(self) -> list[list[str]]:
        return [job for _, jobs in self.launches for job in jobs]

    @property
    def dirs(self) -> list[str]:
        return job_dirs(self.cfg, self.jobs, self.constants)

    @property
    def constants(self) -> dict:
        """The overrides every job of the sweep dir's first launch shares, which its job dir
        names leave out (runs/jobs.py)."""
        return dir_constants(self.cfg, self.out, self.launches[0][1] if self.launches else [])


def plan_sweep(args: argparse.Namespace) -> Sweep:
    """The sweep the command names; a bad override or config raises (one line in main)."""
    name = ALIASES.get(args.finding, args.finding)
    finding = FINDINGS[name]
    experiment = finding.experiment + ("_gpu" if args.size == "gpu" else "")
    out = (args.out or SWEEPS / experiment).resolve()
    cfg = compose(experiment, args.overrides)
    grid = 1 + len(read_reproduce(cfg).widen)  # the launches that choose rates: the grid, widened
    why = registry.unfrozen_runs(name, experiment, args.overrides)
    found = launch_overrides(cfg, args.overrides)
    # the freeze's fresh seeds for the runs it covers; other runs run what the command says
    found = found if why and not args.rung else fresh(finding, found, grid)  # a rung: fresh too
    launches = [(o, planned_jobs(cfg, o)) for o in found]
    command = " ".join(
        ["python scripts/reproduce.py", args.finding, "--size", args.size, *args.overrides]
    )
    return Sweep(name, finding, experiment, out, cfg, launches, command, why)


def fresh(finding: Finding, launches: list[list[str]], grid: int) -> list[list[str]]:
    """Once the registry is frozen, the launches its claims are decided on run the fresh seeds:
    every launch of a finding that chooses no rate; of one that does, its arms at one fixed rate
    (the grid, its widenings and an arm on the grid's rates choose the rates; the confirming
    launches run the fresh seeds at them)."""
    seeds = fresh_seeds(finding)
    if not seeds:
        return launches
    if finding.mode == "init_probe":
        return [[*o, f"init_probe.seeds=[{','.join(map(str, seeds))}]"] for o in launches]
    given = "seed=" + ",".join(map(str, seeds))

    def decides(k: int, launch: list[str]) -> bool:
        fixed = any(o.startswith("optim.lr=") and "," not in o for o in launch)
        return not finding.selects or (k >= grid and fixed)

    return [
        [o for o in launch if not o.startswith("seed=")] + [given] if decides(k, launch) else launch
        for k, launch in enumerate(launches)
    ]


def launch(sweep: Sweep) -> int:
    """Launch what is left of the sweep (each launch whose runs have not all finished)."""
    code = 0
    for overrides, jobs in sweep.launches:
        dirs = job_dirs(sweep.cfg, jobs, sweep.constants)
        if not all_finished(sweep.out, dirs):
            mode = sweep.finding.mode
            code = max(code, run_sweep(sweep.experiment, jobs, dirs, sweep.out, overrides, mode))
    return code


def bad_overrides(err: Exception) -> int:
    """A bad override or config (composing the sweep, or resolving a job's config): one line
    naming the error, exit status 1."""
    why = (str(err).strip().splitlines() or [type(err).__name__])[0]
    console.print(f"error: {type(err).__name__}: {why}; check the overrides", markup=False)
    return 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.recompute:
            return registry.recompute_all(args.recompute, write=args.rejudge)
        if args.freeze is not None:
            return registry.freeze(args.freeze)
    except ConfigError as err:  # a cut frozen.json: one line
        console.print(f"error: {err}", markup=False)
        return 1
    if args.finding == "all":
        return reproduce_all(args)
    if args.ladder:
        from experiments import ladder

        return ladder.run(args, main, SWEEPS)
    try:
        sweep = plan_sweep(args)
        jobs, dirs, out = sweep.jobs, sweep.dirs, sweep.out
    except Exception as err:  # noqa: BLE001 - a bad override or config: one line, then exit
        return bad_overrides(err)
    if problem := (None if args.dry_run else busy(out)) or claim_sweep_dir(
        out, sweep.experiment, args.overrides, args.dry_run
    ):
        console.print(f"error: {problem}", markup=False)
        return 1
    console.print(
        f"[bold]{sweep.finding.title}[/] — experiment={sweep.experiment}, {len(jobs)} runs -> {out}"
    )
    finished_before = all_finished(out, dirs)
    if not finished_before:  # the runs left to train: a resumed or widened sweep skips the rest
        states = run_states(out, dirs)
        left = [j for k, j in enumerate(jobs) if states.get(k, ("",))[0] not in FINISHED]
        try:  # each job's config resolved: a value the experiment has no entry for fails here
            minutes = estimate_s(sweep.cfg, left, sweep.finding.mode) / 60
        except Exception as err:  # noqa: BLE001 - an override the experiment cannot take
            return bad_overrides(err)
        console.print(f"  estimate: ~{minutes:.1f} min for {len(left)} runs {ESTIMATE}")
    if args.dry_run:
        for k, job in enumerate(dirs):
            console.print(f"  #{k}: {job}", markup=False)
        for claim in sweep.finding.claims:
            console.print(f"  claim {claim.id}: {claim.statement} ({claim.source})", markup=False)
            console.print(f"    rule: {rule_text(claim)}", markup=False)
        return 0
    clock = Clock()
    found = [out / f"{verdict_stem(sweep.name)}.json", out / "verdict.json"]
    earlier = next((r for p in found if (r := read_verdict(p)) is not None), None)
    if finished_before:
        console.print(f"all {len(jobs)} runs in {out} finished; not launching the sweep again")
        sweep.command = earlier.get("command", sweep.command) if earlier else sweep.command
        code, timing = 0, earlier  # the sweep's time and the command(s) that ran it
    else:
        code, timing = launch(sweep), None
    try:  # the confirmation reads the grid's report
        confirming = confirm_launches(sweep, args.overrides, code)
    except ConfigError as err:
        console.print(f"error: {err}", markup=False)
        return 1
    if confirming:
        sweep.launches += confirming
        jobs, dirs = sweep.jobs, sweep.dirs
        if not all_finished(out, dirs):
            n = sum(len(j) for _, j in confirming)
            console.print(f"  confirming each variant's best lr on fresh seeds: {n} runs")
            code = max(code, launch(sweep))
            finished_before = False  # this command trained: its time joins the record
    ended = [
        s
        for s, _ in run_states(out, dirs).values()
        if s not in (Status.RUNNING, Outcome.UNFINISHED)
    ]
    if code != 0 and len(ended) < len(jobs):
        console.print(
            f"error: the sweep stopped (exit {code}) before every run ended; "
            f"see {out / 'sweep.log'}"
        )
        return 1
    if earlier and not finished_before:
        timing = extended(earlier, clock.wall(), clock.cpu(), sweep.command)
        sweep.command = timing["command"]  # the earlier launches' commands, then this one
    try:
        return judge(sweep, args, code, clock, timing)
    except ConfigError as err:  # the report cannot be written (a full disk, no runs)
        console.print(f"error: {err}", markup=False)
        return 1


def confirm_launches(sweep: Sweep, overrides: list[str], code: int) -> list[tuple]:
    """Select, then confirm (``reproduce.confirm``): once every grid run has finished, one launch
    per variant at its best lr chosen on the grid's seeds, over the fresh ``seeds``; none while
    the grid is unfinished or when the experiment confirms nothing."""
    reproduce = read_reproduce(sweep.cfg)
    confirm = reproduce.confirm
    if not confirm or code != 0 or not all_finished(sweep.out, sweep.dirs):
        return []
    grid_lrs = swept_values(sweep.jobs).get("optim.lr", [])
    seeds = "seed=" + ",".join(map(str, fresh_seeds(sweep.finding) or confirm.seeds))
    out = []
    report = write_report(sweep.out, plots=False)
    table = read_table(sweep.name, report, reproduce, {"best_val_loss"})  # the lr rule's input
    fresh = set(fresh_seeds(sweep.finding) or confirm.seeds)
    runs, _ = load_runs(sweep.out, skip=sweep.out / "report")
    for chosen in confirm_lrs(sweep.finding, table, list(confirm.by)):
        lr = next((t for t in grid_lrs if float(t) == chosen["lr"]), repr(chosen["lr"]))
        fixed = arm_overrides(sweep.experiment, runs, chosen, confirm.by, fresh)
        these = [*overrides, *fixed, f"optim.lr={lr}", seeds]
        out.append((these, planned_jobs(sweep.cfg, these)))
    return out


def judge(sweep: Sweep, args: argparse.Namespace, code: int, clock: Clock, timing) -> int:
    """Compare the runs, decide the claims, write (and publish) the verdicts."""
    out, name = sweep.out, sweep.name
    report = write_report(out)
    if report["wandb"]:  # the runs logged to wandb: the report joins their group
        console.print(log_report(report, out / "report", table_cells(report)))
    for figure in sweep.finding.figures:
        xy_figure(out, figure.x, list(figure.ys), name=figure.name)
    for draw in sweep.finding.draws:
        draw(out)
    table, verdicts = decide_finding(
        name, report, read_reproduce(sweep.cfg), confirmable=sweep.exploratory is None
    )
    if sweep.exploratory:
        console.print(f"exploratory: {sweep.exploratory}", markup=False)
    runs = [r for v in report["variants"] for r in v["runs"]]
    statuses = sorted({r["status"] for r in runs})
    record = {
        "finding": name,
        "title": sweep.finding.title,
        "experiment": sweep.experiment,
        "size": args.size,
        "kind": sweep.finding.mode,  # the published field
        "command": sweep.command,
        "sweep_dir": str(out),
        "sweep_returncode": code,
        "n_runs": len(runs) or len(sweep.jobs),
        "run_status": {s: sum(r["status"] == s for r in runs) for s in statuses},
        **clock.times(),
        **{k: timing[k] for k in TIMING if timing and k in timing},
        "left_out": report.get("left_out", []),
        "registry": hash_now(),
        "claims": verdicts,
        "table": table,
        **({"exploratory": sweep.exploratory} if sweep.exploratory else {}),
    }
    write_verdicts(out, record)
    show(verdicts)
    if args.publish:
        publish(out, args.publish, name, sweep.finding.plots, verdict_stem(name))
    where = out / f"{verdict_stem(name)}.md"
    console.print(f"verdicts: {where}; report: {out / 'report' / 'report.md'}")
    return exit_status(runs, code, out)


def reproduce_all(args: argparse.Namespace) -> int:
    """Every finding in turn (F13 after F6, whose sweep it reads), each as its own command would
    run it; then one table of verdicts and times. --publish DIR publishes each into DIR/<id>."""
    if args.out is not None:
        raise SystemExit("error: reproduce.py all writes each sweep to its own dir; drop --out")
    flags = ["--size", args.size, *(["--dry-run"] if args.dry_run else [])]
    suffix = "_gpu" if args.size == "gpu" else ""
    sweeps = {FINDINGS[n].experiment + suffix: FINDINGS[n].mode for n in FINDINGS}
    total = 0.0
    for experiment, mode in sweeps.items():
        cfg = compose(experiment, args.overrides)
        total += estimate_s(cfg, planned_jobs(cfg, args.overrides), mode)
    console.print(
        f"[bold]{len(FINDINGS)} findings, {len(sweeps)} sweeps[/]: ~{total / 60:.0f} min {ESTIMATE}"
    )
    rows, code = [], 0
    for name in FINDINGS:
        publish_to = ["--publish", str(args.publish / name)] if args.publish else []
        start = time.perf_counter()
        code = max(code, main([name, *flags, *publish_to, *args.overrides]))
        experiment = FINDINGS[name].experiment + suffix
        record = SWEEPS / experiment / f"{verdict_stem(name)}.json"
        if record.is_file() and not args.dry_run:
            r = json.loads(record.read_text())
            holm = counts(r["claims"], "holm_status")
            said = f"{counts(r['claims'], 'status')} (Holm: {holm})"
            rows.append((name, said, r["wall_s"], time.perf_counter() - start))
    if rows:
        table = Table("finding", "verdicts", "sweep wall (min)", "this command (min)")
        for name, said, sweep_s, spent in rows:
            table.add_row(name, said, f"{sweep_s / 60:.1f}", f"{spent / 60:.1f}")
        total = sum(r[2] for r in rows) / 60
        console.print(table)
        console.print(f"sweeps' wall time in all: {total:.1f} min")
    return code


if __name__ == "__main__":
    sys.exit(main())
