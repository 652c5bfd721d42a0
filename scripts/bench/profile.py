"""Where a train.py job's time goes: imports, setup, every part of the fit, and the close.

    python -m scripts.bench profile                          # the default job, 1 thread, CPU time
    python -m scripts.bench profile --threads 2 --clock wall # a quiet machine, all cores
    python -m scripts.bench profile --steps 100 model.n_layer=4   # any train.py overrides

The job runs in this process as train.py runs it (train.attempt), with three additions that
only watch: a Lightning profiler whose clock is `--clock` (cpu: this process's CPU time, which
other jobs on a shared machine do not inflate; it needs --threads 1), timers around the loggers'
writes, and timers around setup and wandb's finish. Each Lightning action counts its *exclusive*
time (minus the actions nested in it), so the categories add up to the whole fit. The imports
are timed in a child process. A second pass, `--ops`, runs the job's model, data and AdamW in a
plain loop under torch.profiler and lists forward, backward and optimizer, and the top aten ops.

    python -m scripts.bench profile --versus "model.qk_norm=false trainer.max_steps=600"

`--versus` profiles nothing: it times the job's training step (model, data and AdamW as train.py
builds them, no Lightning) against the same job with the given overrides, side by side in
alternating rounds, and scales each by its trainer.max_steps: how much faster the configured
job's steps are than another configuration's, measured on this machine.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.profilers import Profiler
from omegaconf import DictConfig

from scripts.bench.core import CLOCKS
from scripts.bench.harness import ROOT, compose_train_cfg

# Lightning action -> category, first match wins (substrings of the action names): callbacks
# first, so that their hooks (on_before_optimizer_step, on_validation_end, ...) count as theirs.
CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    ("probes and divergence", ("Probe", "Divergence")),
    ("checkpoint writes", ("save_checkpoint", "[Callback]resume")),
    ("logging (csv, wandb)", ("logger.", "WandbMetrics")),
    ("progress bar, model summary", ("ProgressBar", "ModelSummary")),
    ("data (next batch)", ("dataloader_next", "val_next", "DataModule")),
    ("validation (forward, eval loop)", ("validation", "_EvaluationLoop")),
    ("model forward (training)", (".training_step",)),
    ("model backward", (".backward",)),
    ("optimizer (AdamW, zero_grad, LR schedule)", (".optimizer_", ".lr_scheduler_step")),
]
LOOP = "Lightning's loop (hooks, bookkeeping)"


class ExclusiveClock(Profiler):
    """A Lightning profiler that sums each action's time minus its nested actions' time."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__()
        self.clock = clock
        self.stack: list[list] = []  # [action, start, time of nested actions]
        self.exclusive: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def start(self, action_name: str) -> None:
        self.stack.append([action_name, self.clock(), 0.0])

    def stop(self, action_name: str) -> None:
        while self.stack:  # an action left open by an exception closes with its parent
            name, start, nested = self.stack.pop()
            took = self.clock() - start
            self.exclusive[name] += took - nested
            self.calls[name] += 1
            if self.stack:
                self.stack[-1][2] += took
            if name == action_name:
                return

    def summary(self) -> str:
        return ""

    def wrap(self, name: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            with self.profile(name):
                return fn(*args, **kwargs)

        return timed


def category(action: str) -> str:
    for name, keys in CATEGORIES:
        if any(k in action for k in keys):
            return name
    return LOOP


def import_seconds(clock: str) -> float:
    """`import train` in a fresh interpreter: CPU time (user + sys) or wall time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import train, wandb"], cwd=ROOT, check=True)
    if clock == "wall":
        return time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


class ProfileHook(Callback):
    """Given to train.run as an extra callback: at the first setup (the fit's; a run's final
    validation sets up again) it installs the profiler on the trainer and times each logger's
    writes under it; it marks when the first stage starts and the last ends, so the setup
    before and the close after them are timed too."""

    def __init__(self, prof: ExclusiveClock) -> None:
        self.prof = prof
        self.fit_start = self.fit_end = math.nan

    def setup(self, trainer, pl_module, stage: str) -> None:
        if not math.isnan(self.fit_start):
            return
        self.fit_start = self.prof.clock()
        trainer.profiler = self.prof
        for logger in trainer.loggers:
            kind = type(logger).__name__
            logger.log_metrics = self.prof.wrap(f"logger.{kind}.log_metrics", logger.log_metrics)
            logger.save = self.prof.wrap(f"logger.{kind}.save", logger.save)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self.fit_end = self.prof.clock()


def profile_job(overrides: list[str], clock_name: str) -> tuple[dict[str, float], dict]:
    """Run train.run on the composed config with a profiling callback; seconds per category,
    and the summary."""
    import train

    clock = CLOCKS[clock_name]
    hook = ProfileHook(ExclusiveClock(clock))
    cfg = compose_train_cfg(overrides)
    start = clock()
    summary = train.run(cfg, callbacks=[hook])
    end = clock()
    seconds: dict[str, float] = defaultdict(float)
    for action, s in hook.prof.exclusive.items():
        seconds[category(action)] += s
    seconds["setup: run dir, data, model, loggers, trainer"] = hook.fit_start - start
    seconds["close: wandb finish, summary, result line"] = end - hook.fit_end
    seconds["the rest (between the profiled actions)"] = (end - start) - sum(seconds.values())
    return dict(seconds), summary


def job_loop(overrides: list[str], labels: bool = False) -> tuple[Callable[[], None], DictConfig]:
    """One training step of the job's model, data and AdamW without Lightning (as train.py
    builds them), and the composed config. ``labels``: record_function ranges for the profiler."""
    from torch.profiler import record_function

    from training.build import build_data, build_model
    from training.optim import OPTIMIZERS
    from training.run_config import typed_config
    from training.threads import set_threads

    cfg = compose_train_cfg(overrides)
    set_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    run = typed_config(cfg)
    dm = build_data(run)
    model = build_model(run, dm)
    optim = run.optim
    opt = OPTIMIZERS[optim.name](model, optim)
    batches = iter(dm.train_dataloader())
    label = record_function if labels else lambda name: contextlib.nullcontext()

    def step() -> None:
        inputs, targets = next(batches)
        with label("## forward"):
            _, loss = model(inputs, targets)
        with label("## backward"):
            loss.backward()
        with label("## optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)

    return step, cfg


def op_profile(overrides: list[str], steps: int, top: int) -> None:
    """The job's model, data and AdamW in a plain loop under torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    step, _ = job_loop(overrides, labels=True)
    for _ in range(3):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    print(f"\ntorch.profiler over {steps} steps ({total / steps / 1e3:.1f} ms/step of op time)")
    for e in sorted(events, key=lambda e: -e.cpu_time_total):
        if e.key.startswith("## "):
            print(f"  {e.key[3:]:<12} {e.cpu_time_total / total:6.1%}")
    print(f"  top {top} ops by self time:")
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:top]:
        share = e.self_cpu_time_total / total
        print(f"    {e.key:<52} {share:6.1%} {e.self_cpu_time_total / steps / 1e3:8.2f} ms/step")


def versus(ours: list[str], other: list[str], clock: str, rounds: int, steps: int) -> dict:
    """Steps of the job as configured (`ours`) and of the job with `other` overrides, in
    alternation (rounds of `steps` steps each): time per step, tokens per second, and how much
    shorter the training steps of the whole job are (steps x time per step)."""
    from scripts.bench.core import BenchConfig, interleaved, pair_result

    loops = {"ours": job_loop(ours), "other": job_loop(other)}
    fns = {k: step for k, (step, _) in loops.items()}
    for fn in fns.values():
        for _ in range(3):
            fn()
    times = interleaved(fns, BenchConfig(clock=clock, reps=rounds, iters=steps))
    pair = pair_result("job", times, "ours", "other")
    out = {"per_step_speedup": pair.value, "spread": pair.spread}
    for k, (_, cfg) in loops.items():
        per_step = statistics.median(times[k])
        tokens = cfg.data.batch_size * cfg.model.block_size
        out[k] = {
            "ms_per_step": per_step * 1e3,
            "tokens_per_s": tokens / per_step,
            "max_steps": cfg.trainer.max_steps,
            "train_s": per_step * cfg.trainer.max_steps,
        }
        print(
            f"{k:>5}: {per_step * 1e3:7.1f} ms/step, {tokens / per_step:8,.0f} tokens/s, "
            f"{cfg.trainer.max_steps} steps = {per_step * cfg.trainer.max_steps:6.1f} s"
        )
    ratio = out["other"]["train_s"] / out["ours"]["train_s"]
    out["job_train_speedup"] = ratio
    lo, hi = pair.spread
    print(
        f"ours per step: {pair.value:.3f}x the speed of other (rounds {lo:.3f}-{hi:.3f}); "
        f"the job's training steps: {ratio:.2f}x faster"
    )
    return out


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(prog="python -m scripts.bench profile", description=__doc__)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--clock", choices=tuple(CLOCKS), default=None, help="default: cpu at 1 thread")
    p.add_argument("--steps", type=int, default=None, help="trainer.max_steps (default: the job's)")
    p.add_argument("--ops", type=int, default=0, help="also profile N steps' ops (torch.profiler)")
    p.add_argument("--top", type=int, default=15)
    p.add_argument(
        "--versus",
        default=None,
        help="instead of profiling: time the job's step against the job with these overrides "
        "(one quoted string), side by side in this process",
    )
    p.add_argument("--rounds", type=int, default=7, help="--versus: alternating rounds")
    p.add_argument("--round-steps", type=int, default=5, help="--versus: steps per round")
    p.add_argument("overrides", nargs="*", help="train.py overrides")
    args = p.parse_args(argv)
    clock = args.clock or ("cpu" if args.threads == 1 else "wall")
    if clock == "cpu" and args.threads != 1:
        p.error("--clock cpu counts every thread's time; use it with --threads 1")
    over = [f"num_threads={args.threads}", *args.overrides]
    over += [f"trainer.max_steps={args.steps}"] if args.steps else []
    if args.versus is not None:
        return versus(over, [*over, *args.versus.split()], clock, args.rounds, args.round_steps)
    imports = import_seconds(clock)
    with tempfile.TemporaryDirectory() as tmp:
        seconds, summary = profile_job([*over, f"run_dir={Path(tmp) / 'run'}"], clock)
    seconds = {"imports (train, lightning, wandb)": imports, **seconds}
    total = sum(seconds.values())
    print(
        f"{clock} seconds, {summary['steps']} steps, {args.threads} thread(s), val loss "
        f"{summary['final_val_loss']:.4f}, logged {summary['tokens_per_s']:,.0f} tokens/s"
    )
    for name, s in sorted(seconds.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<44} {s:8.2f} s {s / total:6.1%}")
    print(f"  {'total':<44} {total:8.2f} s")
    if args.ops:
        op_profile([o for o in over if not o.startswith("trainer.max")], args.ops, args.top)
    return seconds


if __name__ == "__main__":
    main()
