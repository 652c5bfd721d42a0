"""The training-loop sections: train.run's steady-state step against a raw loop of the same
work without Lightning (marginal time per step, so setup cancels), the probe callbacks' overhead
as scripts/bench/probe_set.py measures it, and peak memory: this process, a short default train.py
job, and CPU training steps of the GPU configuration, each child polled for its peak RSS.
"""

from __future__ import annotations

import contextlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from analysis.runs import run_series
from runs.runfiles import CHECKOUT
from scripts.bench.core import (
    CLOCKS,
    GPT_SIZES,
    BenchConfig,
    LMSize,
    Result,
    interleaved,
    skip,
    speed_results,
    train_step,
    warm,
)
from scripts.bench.models import normlab_gpt

ROOT = CHECKOUT


# ---------------------------------------------------------------- Lightning overhead
def compose_train_cfg(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def raw_loop(cfg) -> None:
    """train.run's work without Lightning: the same data, model, AdamW groups, LR schedule,
    device and precision, for trainer.max_steps steps."""
    from training.build import build_data, build_model
    from training.optim import OPTIMIZERS
    from training.optim_config import lr_multiplier
    from training.run_config import typed_config
    from training.threads import set_threads

    set_threads(cfg.num_threads)
    torch.use_deterministic_algorithms(bool(cfg.trainer.get("deterministic")))  # as the Trainer
    torch.manual_seed(cfg.seed)
    run = typed_config(cfg)
    dm = build_data(run)
    device = "cuda" if run.trainer.accelerator == "gpu" else "cpu"
    model = build_model(run, dm).to(device)
    if run.compile:
        model.compile(mode=run.compile)
    optim, steps = run.optim, run.max_steps
    opt = OPTIMIZERS[optim.name](model, optim)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lr_multiplier(i, optim, steps))
    bf16 = "bf16" in str(cfg.trainer.precision)
    batches = iter(dm.train_dataloader())
    for _ in range(steps):
        inputs, targets = (t.to(device) for t in next(batches))
        with torch.autocast(device, torch.bfloat16, enabled=bf16):
            _, loss = model(inputs, targets)
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        float(loss.detach())  # the task logs the loss: one sync per step either way


def logged_throughput(run_dir: Path, from_step: int) -> float:
    series = run_series(run_dir, "throughput/tokens_per_s")
    return statistics.median(v for step, v in series if step >= from_step)


def bench_lightning(bc: BenchConfig) -> list[Result]:
    """Steady-state step of train.run vs a raw loop, both as marginal time per step: a long run
    minus a short one, so setup cancels and everything Lightning adds per step stays. The run's
    own throughput metric (training_step through the optimizer step, wall clock) is listed too."""
    if not (ROOT / "train.py").exists():
        return [skip("lightning", "train.run", "train.py not found")]
    import train

    short, long = (3, 10) if bc.quick else (5, 25)  # both end before the first validation (100)
    # Short runs: a warmup longer than the run is refused; the LR never changes the step's cost.
    base = ["logger=csv", "trainer.enable_checkpointing=false", "optim.warmup_steps=1"]
    base.append(f"num_threads={torch.get_num_threads()}")  # else train.run takes every core
    s = GPT_SIZES[bc.size]  # the gpt section's model, on the default job's text
    base += [f"model.{k}={getattr(s, k)}" for k in ("n_layer", "n_head", "n_embd", "block_size")]
    base += [f"data.batch_size={s.batch_size}", "model.init=gpt2"]
    base += ["trainer.log_every_n_steps=1"] if bc.quick else []
    base += ["trainer=gpu"] if bc.device == "cuda" else []
    base += ["trainer.precision=bf16-mixed"] if bc.precision == "bf16" else []
    base += ["compile=true"] if bc.compile else []
    clock = CLOCKS[bc.clock]
    deterministic, threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    secs: dict[tuple[str, int], list[float]] = {}
    logged = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for rep in range(1 if bc.quick else 2):
                for steps in (short, long):
                    run_dir = Path(tmp) / f"{rep}-{steps}"
                    over = [*base, f"trainer.max_steps={steps}", f"run_dir={run_dir}"]
                    cfg = compose_train_cfg(over)
                    for name, fn in (("train.run", train.run), ("raw loop", raw_loop)):
                        start = clock()
                        fn(cfg)
                        secs.setdefault((name, steps), []).append(clock() - start)
                        torch.use_deterministic_algorithms(deterministic)  # both turn it on
                logged.append(logged_throughput(run_dir, from_step=short))
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.set_num_threads(threads)
    tokens = cfg.data.batch_size * cfg.model.block_size
    size = f"L{s.n_layer} H{s.n_head} d{s.n_embd} T{s.block_size} B{s.batch_size}"
    note = f"{size}, {cfg.trainer.precision}, marginal per step over {short}-{long}"
    out, tps = [], {}
    for name in ("raw loop", "train.run"):
        extra = statistics.median(secs[name, long]) - statistics.median(secs[name, short])
        if extra <= 0:  # a tiny quick run: setup noise can exceed the extra steps
            out.append(skip("lightning", name, "run-length difference lost in noise"))
        else:
            tps[name] = tokens * (long - short) / extra
    tps["train.run logged"] = statistics.median(logged)
    raw = tps.get("raw loop")
    for name, value in tps.items():
        ratio = raw and value / raw
        if name == "train.run logged":  # a wall-clock rate: no ratio to CPU-time rates
            note = "throughput/tokens_per_s: training_step to optimizer step, wall clock"
            ratio = ratio if bc.clock == "wall" else None
        out.append(Result("lightning", name, value, "tok/s", ratio, None, note))
    return out


# ---------------------------------------------------------------- the optimizer step
# F11's CPU size (24 layers, width 64, context 32, batch 16; conf/experiment/f11_admin.yaml):
# the findings' deepest, narrowest model, where the optimizer's share of a step is largest.
OPTIMIZER_SIZES = {"quick": LMSize(2, 2, 32, 32, 64, 4), "cpu": LMSize(24, 4, 64, 32, 256, 16)}


def bench_optimizer(bc: BenchConfig) -> list[Result]:
    """optim.fused on the CPU: torch's fused AdamW against its default (foreach) step, as the
    whole training step and as the optimizer step alone, each timed in alternation; and how
    far their losses part over the timed steps."""
    if bc.device != "cpu":
        return [skip("optimizer", "fused AdamW", "a GPU always takes the fused step")]
    from training.optim import OPTIMIZERS
    from training.optim_config import OptimConfig

    s = OPTIMIZER_SIZES[bc.size]
    idx = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size))
    steps, opt_steps, losses = {}, {}, {}
    for name, fused in (("default step", None), ("fused", True)):
        torch.manual_seed(0)
        model = normlab_gpt(s)
        opt = OPTIMIZERS["adamw"](model, OptimConfig(lr=1e-3, fused=fused))
        losses[name] = []

        def step(model=model, opt=opt, seen=losses[name]) -> None:
            loss = model(idx, idx)[1]
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            seen.append(loss.item())

        def optimizer_step(model=model, opt=opt) -> None:
            for p in model.parameters():  # a fixed gradient: only the update is timed
                p.grad = torch.full_like(p, 1e-3)
            opt.step()

        steps[name], opt_steps[name] = step, optimizer_step
    size = f"L{s.n_layer} d{s.n_embd} T{s.block_size} B{s.batch_size}"
    tokens = s.batch_size * s.block_size
    for fn in steps.values():
        warm(fn, bc)
    out = speed_results("optimizer", interleaved(steps, bc), "default step", tokens, "tok/s",
                        f"{size}: forward + backward + AdamW step")  # fmt: skip
    for fn in opt_steps.values():
        warm(fn, bc)
    for r in speed_results("optimizer", interleaved(opt_steps, bc), "default step", 0, "ms",
                           f"{size}: the AdamW step alone"):  # fmt: skip
        r.name = f"{r.name} (AdamW alone)"
        out.append(r)
    parted = max(abs(a - b) for a, b in zip(losses["fused"], losses["default step"], strict=True))
    out[1].note += f"; losses part by at most {parted:.1e} over {len(losses['fused'])} steps"
    return out


# ---------------------------------------------------------------- probes and memory
def bench_probes(bc: BenchConfig) -> list[Result]:
    """scripts/bench/probe_set.py's plain vs probed step (the default probe set), and each probe
    callback's own time per step."""
    from scripts.bench import probe_set

    args = ["--device", bc.device, "--clock", "cpu" if bc.clock == "cpu" else "wall"]
    if bc.quick:
        args += ["--n-layer", "1", "--n-embd", "32", "--block-size", "32", "--batch-size", "4"]
        args += ["--steps-per-block", "2", "--blocks", "2"]
    r = probe_set.measure(probe_set.parse_args(args))
    plain, probed = r["plain_s"] * 1e3, r["probed_s"] * 1e3
    out = [
        Result("probes", "plain step", plain, "ms", 1.0, note="probe_set defaults"),
        Result("probes", "probed step", probed, "ms", plain / probed, note="default probe set"),
    ]
    for name, s in sorted(r["per_callback_s"].items(), key=lambda kv: -kv[1]):
        out.append(Result("probes", name, s * 1e3, "ms", None, note="its hooks, per step"))
    return out


def peak_rss_kib(pid: int) -> int:
    """VmHWM, the peak resident set of the process's current image (it starts at exec)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise OSError(f"no VmHWM for pid {pid}")


def peak_rss_of(args: list[str], what: str) -> float:
    """Run `args` from the repository root and return its peak RSS in MiB. The child is polled:
    its rusage would start from this process's peak (Linux copies the parent's high-water mark
    at exec)."""
    with tempfile.TemporaryFile("w+") as err:
        env = {**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
        peak = 0
        while proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):  # between exec and exit
                peak = max(peak, peak_rss_kib(proc.pid))
            time.sleep(0.05)
        err.seek(0)
        last = err.read().strip().splitlines()[-1:]
    if proc.returncode != 0 or not peak:
        raise RuntimeError(f"{what} exited with {proc.returncode}: {last}")
    return peak / 1024


def gpt_steps(size: str, steps: int = 2) -> None:
    """`steps` fp32 training steps of normlab's GPT at GPT_SIZES[size] on the CPU (AdamW's
    state exists from the first step on): what the memory section measures in a subprocess."""
    s = GPT_SIZES[size]
    model = normlab_gpt(s)
    x = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size))
    step = train_step(model, lambda: model(x, x)[1], BenchConfig())
    for _ in range(steps):
        step()


def bench_memory(bc: BenchConfig) -> list[Result]:
    """Peak RSS of this process so far, of a short default train.py job, and of CPU training
    steps of the GPU configuration (GPT-2 small), each in a subprocess."""
    mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    out = [Result("memory", "bench process peak RSS", mib, "MiB", note="the sections run before")]
    if not (ROOT / "train.py").exists():
        return [*out, skip("memory", "train.py peak RSS", "train.py not found")]
    steps = 3 if bc.quick else 20
    with tempfile.TemporaryDirectory() as tmp:
        args = [sys.executable, "train.py", f"trainer.max_steps={steps}", f"hydra.run.dir={tmp}"]
        args.append("optim.warmup_steps=1")  # a warmup longer than the run is refused
        args += ["logger=csv", "num_threads=1"] if bc.quick else []  # seconds, not half a minute
        peak = peak_rss_of(args, "train.py")
    job = "default job, csv logger" if bc.quick else "default job"
    note = f"{job}, {steps} steps (wandb's service process not counted)"
    out.append(Result("memory", "train.py peak RSS", peak, "MiB", note=note))
    if bc.device == "cuda":  # the gpt section reports each model's GPU peak memory
        return out
    size = "quick" if bc.quick else "cuda"
    code = f"from scripts.bench.harness import gpt_steps; gpt_steps({size!r})"
    peak = peak_rss_of([sys.executable, "-c", code], "gpt_steps")
    s = GPT_SIZES[size]
    note = f"GPU config L{s.n_layer} d{s.n_embd} T{s.block_size} B{s.batch_size}, CPU fp32, 2 steps"
    return [*out, Result("memory", "GPT steps peak RSS", peak, "MiB", note=note)]
