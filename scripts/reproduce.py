"""One command per finding: run its sweep, compare the runs, decide each published claim.

    python scripts/reproduce.py f3                  # CPU size, into multirun/reproduce/f3_depth
    python scripts/reproduce.py f3 --size gpu       # the GPU size (experiment f3_depth_gpu)
    python scripts/reproduce.py f2 --dry-run        # show the sweep and the claims, run nothing
    python scripts/reproduce.py f5 --out DIR trainer.max_steps=100   # extra Hydra overrides
    python scripts/reproduce.py f3 --publish docs/findings/f3   # also copy verdict, report, plots
    python scripts/reproduce.py all --publish docs/findings     # every finding in turn (~2 h)

Findings: f1 (init probe, no training), f2 (warmup), f3 (depth; F4 is its shallow arm, alias f4),
f5 (LayerNorm vs RMSNorm), vit (ViT depth), f6 (attention logits, QK-norm and LR sensitivity),
f7 (BatchNorm vs LayerNorm and RMSNorm across batch sizes), placements (every placement at
depth), f8 (the residual stream, Pre-LN vs Peri-LN), f10 (attention entropy, QK-norm), f12
(log Z and z-loss). Each sweep runs as ``python train.py -m
experiment=<name> hydra.sweep.dir=<out>`` (f1 with scripts/init_probe.py). Then
scripts/analysis/report.py writes <out>/report/ and scripts/analysis/findings decides the claims
into <out>/verdict.md and <out>/verdict.json, from the runs that completed or diverged only (a
failed run is no divergence). Exit status 0 when every run completed or diverged, whatever the
verdicts; 1 when the sweep could not run or any of its runs failed. Running the same command
again resumes: a sweep whose runs all finished is not launched again, and train.py skips
finished runs of an unfinished sweep.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a file: make the project root importable
    sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn  # noqa: E402
from rich.table import Table  # noqa: E402

from scripts.analysis.findings import ALIASES, FINDINGS, STATUSES, Verdict, evaluate  # noqa: E402
from scripts.analysis.report import compare, table_cells, xy_figure  # noqa: E402
from scripts.analysis.runs import FINISHED, read_summary, status_of  # noqa: E402
from scripts.analysis.wandb_report import log_report  # noqa: E402
from training.launch import die_with_parent, job_dir  # noqa: E402

SIZES = ("cpu", "gpu")
TIMING = ("wall_s", "cpu_s", "cpus", "load_start", "load_end", "launches")
console = Console(soft_wrap=True)  # log files keep one line per message


# --- the sweep as Hydra sees it ------------------------------------------------------------------
def split_overrides(overrides: list[str]) -> tuple[list[str], list[str]]:
    """(single-valued overrides, sweep overrides such as model.n_layer=3,6)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    single = [o.input_line for o in parsed if not o.is_sweep_override()]
    return single, [o.input_line for o in parsed if o.is_sweep_override()]


def compose(experiment: str, overrides: list[str]):
    """The experiment's config with hydra's node (sweep params, launcher) and the overrides."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    single, _ = split_overrides(overrides)
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3", job_name="reproduce"):
        return hydra_compose(
            "config", [f"experiment={experiment}", *single], return_hydra_config=True
        )


def sweep_jobs(cfg, overrides: list[str]) -> list[list[str]]:
    """Each job's overrides, in Hydra's launch order; command line overrides replace the
    experiment's sweep params of the same key, as in train.py -m (training/launch.py: grid)."""
    from training.sweep import grid

    return grid(cfg.hydra.sweeper.params, overrides)


def launch_overrides(cfg, overrides: list[str]) -> list[list[str]]:
    """The overrides of each launch into the sweep dir: the experiment's grid, then each entry of
    its ``reproduce.widen`` (more learning rates for the variants whose best sat at an edge of
    the grid, e.g. ``[placement=pre, optim.lr=3e-2]``), each with the command line's."""
    return [overrides, *([*overrides, *extra] for extra in settings_of(cfg).get("widen", []))]


def settings_of(cfg) -> dict[str, Any]:
    """The experiment's ``reproduce`` node: where the claims look, how F1 probes."""
    from omegaconf import OmegaConf

    node = cfg.get("reproduce")
    return OmegaConf.to_container(node, resolve=True) if node is not None else {}


def swept_values(jobs: list[list[str]]) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for job in jobs:
        for item in job:
            key, _, value = item.partition("=")
            if value not in values.setdefault(key.lstrip("+~"), []):
                values[key.lstrip("+~")].append(value)
    return values


def job_dirs(cfg, jobs: list[list[str]]) -> list[str]:
    """Each job's directory name below the sweep dir, as train.py -m names it: by the job's
    overrides (training/launch.py's job_dir), with the experiment's config for the rest."""
    experiment = cfg.hydra.runtime.choices.experiment
    return [job_dir([f"experiment={experiment}", *job], cfg) for job in jobs]


# --- runs on disk --------------------------------------------------------------------------------
def run_states(out: Path, dirs: list[str]) -> dict[int, tuple[str, float | None]]:
    """Job index -> (status, summary.json's mtime) for the jobs whose dir exists; "running"
    while a dir has no summary."""
    states: dict[int, tuple[str, float | None]] = {}
    for k, name in enumerate(dirs):
        path = out / name
        if not path.is_dir():
            continue
        summary = read_summary(path)
        if summary is None:
            states[k] = ("running", None)
        elif not summary:  # being written: look again next time
            states[k] = (status_of(summary), None)
        else:
            states[k] = (status_of(summary), (path / "summary.json").stat().st_mtime)
    return states


def all_finished(out: Path, dirs: list[str]) -> bool:
    states = run_states(out, dirs)
    return bool(dirs) and all(states.get(k, ("",))[0] in FINISHED for k in range(len(dirs)))


# --- the time a sweep will take ----------------------------------------------------------------
# A job's time ~ OVERHEAD_S + STEP_S x steps + FLOPs / (RATE_FLOPS x torch threads) +
# LAYER_STEP_S x layer-steps, on the reference 2-core machine (docs/reproducing.md): a d=64 GPT
# step runs at ~59 GFLOP/s on one thread plus ~1.8 ms a layer (small matrices pay per call),
# measured on bare steps; a run adds ~23 ms a step (optimizer, logging, probes) and ~6.5 s to
# start and close, fitted to the suite's measured sweeps (within 20% for those over 5 minutes).
RATE_FLOPS, LAYER_STEP_S, STEP_S, OVERHEAD_S = 59e9, 1.8e-3, 0.023, 6.5
IMAGE_SIDE = {"digits": 8}  # data sources whose images keep their native size


def job_work(cfg, job: list[str]) -> tuple[float, float, float]:
    """(training FLOPs, layer-steps, steps) of one job: 6 x block params x tokens plus attention
    (and a BPE head), n_layer x steps; validation adds its batches at a third of a step's cost."""
    o = {k.lstrip("+~"): v for k, _, v in (item.partition("=") for item in job)}

    def get(key: str, default: float) -> float:
        node = cfg
        for part in key.split("."):
            node = node.get(part) if node is not None and hasattr(node, "get") else None
        return float(o.get(key, node if isinstance(node, int | float) else default))

    layers, width = get("model.n_layer", 2), get("model.n_embd", 128)
    batch, steps = get("data.batch_size", 32), get("trainer.max_steps", 0)
    if cfg.model.name == "vit":
        side = get("data.image_size", IMAGE_SIDE.get(cfg.data.get("source"), 32))
        context = (side // get("model.patch_size", 4)) ** 2 + 1
    else:
        context = get("model.block_size", 128)
    vocab = get("data.vocab_size", 0) if cfg.data.get("tokenizer") == "bpe" else 0  # chars: ~0
    per_token = 6 * 12 * layers * width * width + 12 * layers * context * width + 6 * vocab * width
    checks = steps / max(get("trainer.val_check_interval", 50), 1)
    val = 1 + checks * get("data.val_batches", 8) / 3 / max(steps, 1)
    return per_token * batch * context * steps * val, layers * steps * val, steps


def estimate_s(cfg, jobs: list[list[str]], kind: str) -> float:
    """Wall seconds the sweep should take here: its jobs' times over the parallel jobs."""
    if kind != "train":
        return OVERHEAD_S * 2
    parallel = int(cfg.hydra.launcher.get("n_jobs", 1) or 1)
    threads = int(cfg.get("num_threads") or max(1, (os.cpu_count() or 1) // parallel))
    total = 0.0
    for job in jobs:
        flops, layer_steps, steps = job_work(cfg, job)
        total += OVERHEAD_S + STEP_S * steps
        total += flops / (RATE_FLOPS * threads) + LAYER_STEP_S * layer_steps
    return total / max(1, min(parallel, len(jobs)))


ESTIMATE = "on a 2-core machine like the reference one (docs/reproducing.md: measured times)"


def clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


# The program each kind of finding sweeps with.
ENTRIES = {"train": "train.py", "init_probe": "scripts/init_probe.py"}


def run_sweep(
    experiment: str,
    jobs: list[list[str]],
    dirs: list[str],
    out: Path,
    overrides: list[str],
    kind: str = "train",
) -> int:
    """``train.py -m`` (or the init probe's) in a subprocess, with a progress bar; its exit code.

    A run counts as done once it completed or diverged, or once its summary.json is rewritten:
    a failed or killed run from an earlier attempt runs again."""
    cmd = [sys.executable, str(ROOT / ENTRIES[kind]), "-m", f"experiment={experiment}"]
    cmd += [f"hydra.sweep.dir={out}", *overrides]
    before = run_states(out, dirs)
    done = {k for k, (status, _) in before.items() if status in FINISHED}
    before_done, started = set(done), time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    console.print(f"$ {' '.join(cmd)}\n  log: {out / 'sweep.log'}")
    if done:
        console.print(f"  {len(done)} of {len(jobs)} runs finished earlier; train.py skips them")
    varying = [k for k, v in swept_values(jobs).items() if len(v) > 1]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(out / "sweep.log", "a") as log:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent
        )
        columns = [BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
        with Progress("{task.description}", *columns, console=console) as bar:
            task = bar.add_task("runs", total=len(jobs))
            while True:
                code = proc.poll()
                states = run_states(out, dirs)
                for k, (status, mtime) in sorted(states.items()):
                    fresh = mtime is not None and mtime != before.get(k, ("", None))[1]
                    if k not in done and status not in ("running", "unfinished") and fresh:
                        done.add(k)
                        what = " ".join(j for j in jobs[k] if j.partition("=")[0] in varying)
                        pace = eta(started, len(done - before_done), len(jobs) - len(done))
                        line = progress_line(out / dirs[k], k, len(jobs), what, status, pace)
                        console.print(f"  {line}", markup=False)
                running = [str(k) for k, (status, _) in states.items() if status == "running"]
                label = f"runs (running: {', '.join(running)})" if running else "runs"
                bar.update(task, completed=len(done), description=label)
                if code is not None:
                    return code
                time.sleep(1.0)


def progress_line(run: Path, k: int, n: int, what: str, status: str, pace: str) -> str:
    """One finished job: which, how it ended, its best val loss, the time so far and left."""
    best = (read_summary(run) or {}).get("best_val_loss")
    loss = f", best val {best:.4f}" if isinstance(best, int | float) else ""
    return f"run {k + 1}/{n}: {what} -> {status}{loss} [{pace}]"


def eta(started: float, new: int, left: int) -> str:
    """Elapsed time, and what is left at the pace of the jobs finished in this launch."""
    spent = time.perf_counter() - started
    return f"{clock(spent)} elapsed, ~{clock(spent / max(new, 1) * left)} left"


# --- verdicts ------------------------------------------------------------------------------------
def fmt(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={fmt(v)}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def cell(text: Any) -> str:
    return str(text).replace("|", "\\|")  # a pipe would end the table cell


def said(measured: dict, note: str) -> str:
    """A verdict's measured numbers, then its note (an edge of the grid, why not testable)."""
    return "; ".join(x for x in (fmt(measured), note) if x)


def over(record: dict) -> str:
    return f" over {record['launches']} launches" if record.get("launches", 1) > 1 else ""


def verdict_markdown(record: dict) -> str:
    counts = ", ".join(f"{n} {s}" for s, n in record["counts"].items() if n)
    if record["kind"] == "init_probe":
        what = f"{record['n_runs']} init-probe jobs (scripts/init_probe.py, no training)"
    else:
        what = f"{record['n_runs']} runs ({fmt(record['run_status']) or 'none finished'})"
    lines = [
        f"# {record['title']}",
        "",
        f"Command: `{record['command']}`  ",
        f"Sweep: `experiment={record['experiment']}`, {what}.  ",
        f"Time: {record['wall_s'] / 60:.1f} min wall{over(record)} on {record['cpus']} CPUs at "
        f"load average {record['load_start']:.1f} -> {record['load_end']:.1f}; "
        f"{record['cpu_s'] / 60:.1f} CPU-min in all.  ",
        f"Verdicts: {counts}. Report and plots: [report/report.md](report/report.md).",
        "",
        "| claim | statement (source) | measured | threshold | verdict |",
        "|---|---|---|---|---|",
    ]
    for c in record["claims"]:
        cells = [c["id"], f"{c['statement']} ({c['source']})", said(c["measured"], c["note"])]
        cells += [c["threshold"] or "–", f"**{c['status']}**"]
        lines.append("| " + " | ".join(cell(x) for x in cells) + " |")
    if record["kind"] != "init_probe":
        lines += ["", "Losses: mean over seeds of each run's best val loss; inf: a run diverged."]
    left_out = {s: n for s, n in record["run_status"].items() if s not in FINISHED}
    if left_out:
        lines += [
            "",
            f"Left out of every verdict (neither completed nor diverged): {fmt(left_out)}.",
        ]
    return "\n".join(lines) + "\n"


def verdict_stem(finding: str) -> str:
    """verdict for the first finding of an experiment; verdict_<finding> for another finding
    that reads the same sweep (F13 reads F6's), so neither overwrites the other."""
    experiment = FINDINGS[finding].experiment
    first = next(k for k, f in FINDINGS.items() if f.experiment == experiment)
    return "verdict" if finding == first else f"verdict_{finding}"


def write_verdicts(out: Path, record: dict) -> None:
    stem = verdict_stem(record["finding"])
    (out / f"{stem}.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    (out / f"{stem}.md").write_text(verdict_markdown(record))


def publish(out: Path, dest: Path, experiment: str, plots: tuple[str, ...], stem: str) -> None:
    """verdict.md, report/report.md and the key plots into ``dest`` (e.g. docs/findings/f3),
    the sweep dir written as multirun/reproduce/<experiment> and other plots left out."""
    (dest / "report").mkdir(parents=True, exist_ok=True)
    shown = [name for name in plots if (out / "report" / name).is_file()]
    for stale in (dest / "report").glob("*.png"):  # figures of an earlier design
        if stale.name not in shown:
            stale.unlink()
    for name in shown:
        shutil.copyfile(out / "report" / name, dest / "report" / name)
    lines = (out / "report" / "report.md").read_text().splitlines()
    keep = [x for x in lines if not x.startswith("![") or any(f"({n})" in x for n in shown)]
    keep = [x for x in keep if not x.startswith("Upload the offline wandb runs")]
    canonical = f"multirun/reproduce/{experiment}"
    (dest / "report" / "report.md").write_text("\n".join(keep).replace(str(out), canonical) + "\n")
    verdict = (out / f"{stem}.md").read_text().replace(str(out), canonical)
    (dest / "verdict.md").write_text(verdict)
    console.print(f"published to {dest}: verdict.md, report/report.md, {', '.join(shown)}")


def show(verdicts: list[Verdict]) -> None:
    table = Table("claim", "statement", "measured", "threshold", "verdict")
    colors = {"PASS": "green", "FAIL": "red", "NOT TESTABLE": "blue", "NO DATA": "yellow"}
    for v in verdicts:
        measured = said(v.measured, v.note)
        table.add_row(v.id, v.statement, measured, v.threshold, f"[{colors[v.status]}]{v.status}")
    console.print(table)


def cpu_seconds() -> float:
    """CPU time of this process and every finished subprocess (the sweep's jobs included)."""
    import resource

    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def finite_load() -> float:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    return round(load, 2)


# --- entry ---------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("finding", choices=sorted([*FINDINGS, *ALIASES, "all"]))
    p.add_argument("--size", choices=SIZES, default="cpu")
    p.add_argument(
        "--out", type=Path, default=None, help="sweep dir (default multirun/reproduce/<experiment>)"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="show the sweep and the claims; run nothing"
    )
    p.add_argument(
        "--publish", type=Path, default=None, help="copy verdict, report and key plots here"
    )
    p.add_argument("overrides", nargs="*", help="Hydra overrides for every run, e.g. seed=0,1,2")
    args = p.parse_intermixed_args(argv)
    if args.finding == "all":
        return reproduce_all(args)
    name = ALIASES.get(args.finding, args.finding)
    finding = FINDINGS[name]
    experiment = finding.experiment + ("_gpu" if args.size == "gpu" else "")
    out = (args.out or ROOT / "multirun" / "reproduce" / experiment).resolve()
    try:
        cfg = compose(experiment, args.overrides)
        launches = [(o, sweep_jobs(cfg, o)) for o in launch_overrides(cfg, args.overrides)]
        jobs = [job for _, js in launches for job in js]
        dirs = job_dirs(cfg, jobs)
    except Exception as err:  # noqa: BLE001 - a bad override or config: one line, then exit
        console.print(f"error: {type(err).__name__}: {err}; check the overrides", markup=False)
        return 1
    command = " ".join(
        ["python scripts/reproduce.py", args.finding, "--size", args.size, *args.overrides]
    )
    console.print(f"[bold]{finding.title}[/] — experiment={experiment}, {len(jobs)} runs -> {out}")
    finished_before = all_finished(out, dirs)
    if not finished_before:  # the runs left to train: a resumed or widened sweep skips the rest
        states = run_states(out, dirs)
        left = [j for k, j in enumerate(jobs) if states.get(k, ("",))[0] not in FINISHED]
        minutes = estimate_s(cfg, left, finding.kind) / 60
        console.print(f"  estimate: ~{minutes:.1f} min for {len(left)} runs {ESTIMATE}")
    if args.dry_run:
        for k, job in enumerate(dirs):
            console.print(f"  #{k}: {job}", markup=False)
        for claim in finding.claims:
            console.print(f"  claim {claim.id}: {claim.statement} ({claim.source})")
        return 0
    load_start, start, cpu_start = finite_load(), time.perf_counter(), cpu_seconds()
    found = [p for p in (out / f"{verdict_stem(name)}.json", out / "verdict.json") if p.is_file()]
    earlier = json.loads(found[0].read_text()) if found else None
    timing = None  # the sweep's own time, kept when a finished sweep is only re-evaluated
    if finished_before:
        console.print(f"all {len(jobs)} runs in {out} finished; not launching the sweep again")
        timing = earlier  # the sweep's time and the command(s) that ran it
        command = earlier.get("command", command) if earlier else command
        code = 0
    else:
        code = 0
        for overrides, launch_jobs in launches:
            launch_dirs = job_dirs(cfg, launch_jobs)
            if not all_finished(out, launch_dirs):
                code = max(
                    code,
                    run_sweep(experiment, launch_jobs, launch_dirs, out, overrides, finding.kind),
                )
    states = run_states(out, dirs).values()
    ended = [s for s, _ in states if s not in ("running", "unfinished")]
    if code != 0 and len(ended) < len(jobs):
        console.print(
            f"error: the sweep stopped (exit {code}) before every run ended; "
            f"see {out / 'sweep.log'}"
        )
        return 1
    report = compare(out)
    if report["wandb"]:  # the runs logged to wandb: the report joins their group
        console.print(log_report(report, out / "report", table_cells(report)))
    for figure in finding.figures:
        xy_figure(out, figure.x, list(figure.ys), name=figure.name)
    for draw in finding.draws:
        draw(out)
    settings = {**settings_of(cfg), "max_steps": cfg.trainer.max_steps, "lr": cfg.optim.lr}
    verdicts = evaluate(name, report, settings)
    runs = [r for v in report["variants"] for r in v["runs"]]
    record = {
        "finding": name,
        "title": finding.title,
        "experiment": experiment,
        "size": args.size,
        "kind": finding.kind,
        "command": command,
        "sweep_dir": str(out),
        "sweep_returncode": code,
        "n_runs": len(runs) or len(jobs),
        "run_status": {
            s: sum(r["status"] == s for r in runs) for s in sorted({r["status"] for r in runs})
        },
        "wall_s": round(time.perf_counter() - start, 1),
        "cpu_s": round(cpu_seconds() - cpu_start, 1),
        "cpus": os.cpu_count(),
        "load_start": load_start,
        "load_end": finite_load(),
        **{k: timing[k] for k in TIMING if timing and k in timing},
        **(
            extended(earlier, time.perf_counter() - start, cpu_seconds() - cpu_start, command)
            if earlier and not finished_before
            else {}
        ),
        "counts": {s: sum(v.status == s for v in verdicts) for s in STATUSES},
        "claims": [v.to_dict() for v in verdicts],
    }
    write_verdicts(out, record)
    show(verdicts)
    if args.publish:
        publish(out, args.publish, experiment, finding.plots, verdict_stem(name))
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
    sweeps = {FINDINGS[n].experiment + suffix: FINDINGS[n].kind for n in FINDINGS}
    total = 0.0
    for experiment, kind in sweeps.items():
        cfg = compose(experiment, args.overrides)
        total += estimate_s(cfg, sweep_jobs(cfg, args.overrides), kind)
    console.print(
        f"[bold]{len(FINDINGS)} findings, {len(sweeps)} sweeps[/]: ~{total / 60:.0f} min {ESTIMATE}"
    )
    rows, code = [], 0
    for name in FINDINGS:
        publish_to = ["--publish", str(args.publish / name)] if args.publish else []
        start = time.perf_counter()
        code = max(code, main([name, *flags, *publish_to, *args.overrides]))
        experiment = FINDINGS[name].experiment + suffix
        record = ROOT / "multirun" / "reproduce" / experiment / f"{verdict_stem(name)}.json"
        if record.is_file() and not args.dry_run:
            r = json.loads(record.read_text())
            rows.append((name, fmt(r["counts"]), r["wall_s"], time.perf_counter() - start))
    if rows:
        table = Table("finding", "verdicts", "sweep wall (min)", "this command (min)")
        for name, counts, sweep_s, spent in rows:
            table.add_row(name, counts, f"{sweep_s / 60:.1f}", f"{spent / 60:.1f}")
        total = sum(r[2] for r in rows) / 60
        console.print(table)
        console.print(f"sweeps' wall time in all: {total:.1f} min")
    return code


def extended(earlier: dict, wall: float, cpu: float, command: str) -> dict[str, Any]:
    """A launch into a sweep dir that holds an earlier launch's record (a resumed or extended
    sweep, e.g. a widened grid): the times add up, and a new command joins the earlier one."""
    said = earlier["command"]
    return {
        "wall_s": round(earlier["wall_s"] + wall, 1),
        "cpu_s": round(earlier["cpu_s"] + cpu, 1),
        "load_start": earlier.get("load_start", math.nan),
        "command": said if command in said else f"{said}; then {command}",
        "launches": earlier.get("launches", 1) + 1,
    }


def exit_status(runs: list[dict], code: int, out: Path) -> int:
    """1 when a run of the sweep neither completed nor diverged (its verdicts left it out)."""
    failed = [r for r in runs if r["status"] not in FINISHED]
    if failed or code != 0:
        what = ", ".join(f"{Path(r['run_dir']).name} ({r['status']})" for r in failed)
        console.print(
            f"error: {len(failed)} of {len(runs)} runs did not finish ({what or f'exit {code}'}); "
            f"verdicts use the completed and diverged runs only; see {out / 'sweep.log'}",
            markup=False,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
