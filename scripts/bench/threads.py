"""The default thread count, measured side by side: one train.py job at a given ``num_threads``,
on a quiet machine and beside busy processes that hold some cores (a shared machine).

    python -m scripts.bench threads                      # 100 steps of the default job
    python -m scripts.bench threads --busy 0,2 --threads 1,2,auto --repeats 2

Each setting is one train.py process (``auto`` = the default, num_threads=null); settings
alternate within a repeat, so a drift in the machine's load reaches each alike. Busy processes
are pure-Python loops, one per core they hold, started before and stopped after each run.
Prints one row per (busy, threads) with the median wall time of the job from start to exit
and its ratio to the fastest setting at the same load.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def spin() -> None:
    while True:
        pass


def run_job(threads: str, steps: int, work: Path, extra: list[str]) -> float:
    """Seconds from start to exit of one default job at ``threads`` (auto = the default)."""
    run_dir = work / f"run-{time.monotonic_ns()}"
    setting = [] if threads == "auto" else [f"num_threads={threads}"]
    cmd = [sys.executable, "train.py", f"trainer.max_steps={steps}", "logger=csv",
           f"trainer.val_check_interval={steps}", "trainer.enable_progress_bar=false",
           f"hydra.run.dir={run_dir}", *setting, *extra]  # fmt: skip
    began = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    took = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"threads: train.py failed at num_threads={threads}: {done.stderr[-300:]}")
    return took


def measure(busy: list[int], threads: list[str], repeats: int, steps: int, extra: list[str]):
    rows: dict[tuple[int, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="normlab-threads-") as tmp:
        for n_busy in busy:
            for _ in range(repeats):
                hogs = [mp.Process(target=spin, daemon=True) for _ in range(n_busy)]
                for h in hogs:
                    h.start()
                try:
                    time.sleep(2.0 if n_busy else 0.0)  # let the load settle
                    for t in threads:
                        rows.setdefault((n_busy, t), []).append(run_job(t, steps, Path(tmp), extra))
                        print(f"busy={n_busy} threads={t}: {rows[n_busy, t][-1]:.1f} s", flush=True)
                finally:
                    for h in hogs:
                        h.terminate()
    out = []
    for n_busy in busy:
        medians = {t: statistics.median(rows[n_busy, t]) for t in threads}
        fastest = min(medians.values())
        for t in threads:
            out.append({"busy_cores": n_busy, "threads": t, "wall_s": round(medians[t], 1),
                        "x_fastest": round(medians[t] / fastest, 2)})  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(prog="python -m scripts.bench threads", description=__doc__)
    p.add_argument("--busy", default="0,2", help="comma list of busy cores beside the job")
    p.add_argument(
        "--threads", default="1,2,auto", help="comma list of num_threads (auto: default)"
    )
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    p.add_argument("overrides", nargs="*", help="more train.py overrides for every job")
    args = p.parse_args(argv)
    rows = measure(
        [int(b) for b in args.busy.split(",")], args.threads.split(","), args.repeats,
        args.steps, args.overrides,
    )  # fmt: skip
    print(f"{os.cpu_count()} CPUs; median of {args.repeats} per setting, {args.steps} steps")
    print("| busy cores | num_threads | wall s (start to exit) | x fastest at that load |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['busy_cores']} | {r['threads']} | {r['wall_s']} | {r['x_fastest']} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
