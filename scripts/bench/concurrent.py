"""Several train.py runs at once on one machine (one GPU): how many small runs an hour it holds.

    python -m scripts.bench concurrent --jobs 1,4,8 --out sweep.json -- trainer=gpu logger=csv
    python -m scripts.bench concurrent --grid placement=post,pre,deepnorm \
        --grid model.n_layer=6,24 --out f3.json -- trainer=gpu logger=csv

``--jobs K1,K2,...``: for each K, K copies of the same run (seeds 0..K-1) start together as
separate processes; the wall clock from the first start to the last exit gives runs per hour,
and each run's own tokens/s against the K=1 run's gives the per-run slowdown. ``--grid``: every
combination of the grid's values starts together (a short sweep on one device); the table gives
each run's status and final validation loss. Run dirs go under ``--work``. On SIGTERM (a step's
timeout) the runs are stopped, each records ``interrupted`` with the steps it made, and what
finished is still written to ``--out`` and printed as markdown.
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runs import runfiles
from runs.record import read_summary
from runs.runfiles import CHECKOUT

ROOT = CHECKOUT
STOP: list[int] = []  # the signal that asked us to stop, once one did


def dir_name(run: str) -> str:
    """A run's name as a dir Hydra's override grammar takes unquoted (no '=' or ',')."""
    return run.replace("=", "-").replace(",", "_")


def start(overrides: list[str], run_dir: Path) -> subprocess.Popen:
    args = [sys.executable, str(ROOT / "train.py"), *overrides, f"hydra.run.dir={run_dir}"]
    log = open(run_dir.parent / f"{run_dir.name}.log", "w")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def run_together(runs: dict[str, list[str]], work: Path) -> tuple[float, dict[str, dict]]:
    """Start every run at once, wait for all; (wall seconds, each run's summary.json)."""
    work.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    procs = {name: start(ov, work / dir_name(name)) for name, ov in runs.items()}
    while any(proc.poll() is None for proc in procs.values()):
        if STOP:  # a timeout's SIGTERM: the runs stop at a step boundary and record it
            for proc in procs.values():
                if proc.poll() is None:
                    proc.terminate()
            for proc in procs.values():
                proc.wait()
        time.sleep(0.2)
    wall = time.perf_counter() - began
    summaries = {}
    for name in runs:
        path = work / dir_name(name) / runfiles.SUMMARY
        summaries[name] = read_summary(path) or {"status": "none"}
    return wall, summaries


def speed(summary: dict) -> float | None:
    return summary.get("tokens_per_s") or summary.get("samples_per_s")


def jobs_table(counts: list[int], overrides: list[str], work: Path) -> list[dict]:
    rows: list[dict] = []
    for k in counts:
        runs = {f"jobs{k}-seed{i}": [*overrides, f"seed={i}"] for i in range(k)}
        wall, summaries = run_together(runs, work)
        speeds = [s for s in map(speed, summaries.values()) if s]
        done = sum(s.get("status") == "completed" for s in summaries.values())
        row = {"jobs": k, "completed": done, "wall_s": round(wall, 1)}
        # None, not 0, when nothing completed: a failed measurement is no measurement
        row["runs_per_hour"] = round(3600 * done / wall, 1) if done else None
        row["per_run_speed"] = round(sum(speeds) / len(speeds), 1) if speeds else None
        row["total_speed"] = round(sum(speeds), 1) if speeds else None
        base = rows[0]["per_run_speed"] if rows else row["per_run_speed"]
        fast = base and row["per_run_speed"]
        row["per_run_slowdown"] = round(base / row["per_run_speed"], 2) if fast else None
        rows.append(row)
        print(json.dumps(row), flush=True)
        if STOP:
            break
    return rows


def grid_table(grid: list[str], overrides: list[str], work: Path) -> list[dict]:
    axes = [(g.split("=", 1)[0], g.split("=", 1)[1].split(",")) for g in grid]
    runs = {}
    for values in itertools.product(*(v for _, v in axes)):
        sets = [f"{k}={v}" for (k, _), v in zip(axes, values, strict=True)]
        runs[",".join(sets)] = [*overrides, *sets]
    wall, summaries = run_together(runs, work)
    rows = []
    for name, s in summaries.items():
        rows.append(
            {
                "run": name,
                "status": s.get("status"),
                "steps": s.get("steps"),
                "final_val_loss": s.get("final_val_loss"),
                "speed": speed(s),
                "wall_s": s.get("wall_s"),
            }
        )
    print(f"{len(runs)} runs together in {wall:.1f} s", flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    if not rows:
        return "(no rows)\n"
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r.get(k)) for k in keys) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(prog="python -m scripts.bench concurrent", description=__doc__)
    p.add_argument("--jobs", default=None, help="comma list of run counts, e.g. 1,4,8")
    p.add_argument("--grid", action="append", default=[], help="key=v1,v2 (repeatable)")
    p.add_argument("--out", type=Path, required=True, help="JSON rows go here")
    p.add_argument("--work", type=Path, default=None, help="run dirs (default: a temp dir)")
    p.add_argument("overrides", nargs="*", help="train.py overrides for every run")
    args = p.parse_args(argv)
    if bool(args.jobs) == bool(args.grid):
        p.error("give --jobs K1,K2,... or --grid key=v1,v2 (not both)")
    work = args.work or Path(tempfile.mkdtemp(prefix="normlab-concurrent-"))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _: STOP.append(signum))
    if args.jobs:
        rows = jobs_table([int(k) for k in args.jobs.split(",")], args.overrides, work)
    else:
        rows = grid_table(args.grid, args.overrides, work)
    if STOP:
        print("stopped by a signal: the rows measured so far follow", flush=True)
    args.out.write_text(json.dumps(rows, indent=1) + "\n")
    print(markdown(rows), end="")
    return rows


if __name__ == "__main__":  # exit 1 unless every run completed
    rows = main()
    ok = rows and all(r.get("status", "completed") == "completed" for r in rows)
    sys.exit(0 if ok and all(r.get("completed", 1) == r.get("jobs", 1) for r in rows) else 1)
