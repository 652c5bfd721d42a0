"""The sweep behind a finding: its jobs as Hydra composes them, their runs on disk, the time
they will take, and the launch (``train.py -m`` in a subprocess, with a progress line per run).
experiments/reproduce.py drives it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from analysis.findings.settings import read_reproduce
from analysis.runs import run_summary, status_of
from models.flops import training_flops_per_token
from runs import runfiles
from runs.dirlock import RunDirLock
from runs.errors import ConfigError, Refused
from runs.jobs import job_dir, sweep_constants
from runs.record import FINISHED, Outcome, Status

ROOT = runfiles.CHECKOUT
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


def override_value(value: Any) -> str:
    """A config value as a command line writes it (true, null, 0.001, rope)."""
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def arm_overrides(
    experiment: str, runs: list, chosen: dict[str, Any], by: dict[str, str], fresh: set
) -> list[str]:
    """The overrides that fix one arm for its confirming launch, each ``by`` key (report param ->
    override) at the value the arm's grid runs share. The report names only the fields that tell
    its variants apart, so a key another field already separates (nGPT's tied head beside its
    positions, OLMo 2's QK-norm beside its RMSNorm) comes as None: its value is read from the
    arm's grid runs and pinned where the experiment would give another (else the launch would
    run another variant); runs that disagree on it stop the launch in one line, unless some
    leave it null: then the report named it, the arm is those (F19's plain residual beside its
    gated-attention arm). ``runs``: the sweep's (analysis.runs.load_runs), read once for all
    its arms."""
    named = {k: v for k, v in chosen.items() if k in by and v is not None}
    members = [
        r for r in runs
        if r.summary.get("seed") not in fresh
        and all(r.params.get(k) == v for k, v in named.items())
    ]  # fmt: skip
    fixed = [f"{by[k]}={v}" for k, v in named.items()]  # as the report names them
    composed = compose(experiment, fixed) if len(named) < len(by) else None
    for param, key in by.items():
        if param in named:
            continue
        values = {r.params.get(param) for r in members}
        if len(values) > 1 and None in values:  # the report named it: this arm's is null
            members = [r for r in members if r.params.get(param) is None]
            continue
        if len(values) > 1:
            raise ConfigError(
                f"the arm {named} holds runs with {param} = {sorted(map(str, values))}: name "
                f"{key} in reproduce.arms so its confirming runs are one variant"
            )
        if values and (value := values.pop()) is not None:
            default = OmegaConf.select(composed, key) if composed is not None else None
            if value != default:
                fixed.append(f"{key}={override_value(value)}")
    return fixed


def planned_jobs(cfg, overrides: list[str]) -> list[list[str]]:
    """Each job's overrides, in Hydra's launch order; command line overrides replace the
    experiment's sweep params of the same key, as in train.py -m (training/sweep.py: grid)."""
    from runs.jobs import grid

    return grid(cfg.hydra.sweeper.params, overrides)


def launch_overrides(cfg, overrides: list[str]) -> list[list[str]]:
    """The overrides of each launch into the sweep dir: the experiment's grid, then each entry of
    its ``reproduce.widen`` (more learning rates for the variants whose best sat at an edge of
    the grid, e.g. ``[placement=pre, optim.lr=3e-2]``), then each of its ``reproduce.arms``
    (a variant the grid's cross product cannot name, on the grid's other keys), each with the
    command line's."""
    reproduce = read_reproduce(cfg)
    extra = [*reproduce.widen, *reproduce.arms]
    return [overrides, *([*overrides, *more] for more in extra)]


def swept_values(jobs: list[list[str]]) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for job in jobs:
        for item in job:
            key, _, value = item.partition("=")
            if value not in values.setdefault(key.lstrip("+~"), []):
                values[key.lstrip("+~")].append(value)
    return values


def job_dirs(cfg, jobs: list[list[str]], constants: dict | None = None) -> list[str]:
    """Each job's directory name below the sweep dir, as train.py -m names it: by the job's
    overrides without the sweep dir's ``constants`` (training/launch.py's job_dir), with the
    experiment's config for the rest."""
    return [job_dir(o, cfg, constants) for o in with_experiment(cfg, jobs)]


def with_experiment(cfg, jobs: list[list[str]]) -> list[list[str]]:
    """Each job's overrides as train.py -m gets them: the experiment first."""
    return [[f"experiment={cfg.hydra.runtime.choices.experiment}", *job] for job in jobs]


def dir_constants(cfg, out: Path, first: list[list[str]]) -> dict:
    """The overrides the job dirs of sweep dir ``out`` leave out: recorded there by its first
    launch, else (a new dir) those every job of ``first``, the first launch, shares."""
    return sweep_constants(out, with_experiment(cfg, first))


# --- runs on disk --------------------------------------------------------------------------------
def run_states(out: Path, dirs: list[str]) -> dict[int, tuple[str, float | None]]:
    """Job index -> (status, summary.json's mtime) for the jobs whose dir exists; "running"
    while a dir has no summary."""
    states: dict[int, tuple[str, float | None]] = {}
    for k, name in enumerate(dirs):
        path = out / name
        if not path.is_dir():
            continue
        summary = run_summary(path)
        if summary is None:
            states[k] = ("running", None)
        elif not summary:  # being written: look again next time
            states[k] = (status_of(summary), None)
        else:
            states[k] = (status_of(summary), (path / runfiles.SUMMARY).stat().st_mtime)
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
    """(training FLOPs, layer-steps, steps) of one job: models/flops.py's count per token on the
    blocks' parameters (and a BPE head) without building the model, n_layer x steps; validation
    adds its batches at a third of a step's cost."""
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
    # the blocks' 12 d^2 per layer (and a BPE head) stand for the model's exact count
    per_token = training_flops_per_token(
        12 * layers * width**2 + vocab * width, layers, context, width
    )
    checks = steps / max(get("trainer.val_check_interval", 50), 1)
    val = 1 + checks * get("data.val_batches", 8) / 3 / max(steps, 1)
    return per_token * batch * context * steps * val, layers * steps * val, steps


def estimate_s(cfg, jobs: list[list[str]], mode: str) -> float:
    """Wall seconds the sweep should take here: its jobs' times over the parallel jobs."""
    if mode != "train":
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


def die_with_parent() -> None:
    """SIGTERM this process when its parent dies, however it dies (Linux's parent-death signal);
    elsewhere nothing."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def hydra_quoted(value: str) -> str:
    """``value`` as one quoted Hydra override value: a path with a comma would otherwise be a
    sweep over two values, and one with a non-ASCII letter (``/home/josé``) fails Hydra's
    lexer unquoted."""
    if "'" not in value:
        return f"'{value}'"
    return '"' + value.replace('"', '\\"') + '"'


# The program each mode of finding sweeps with.
ENTRIES = {"train": "train.py", "init_probe": "scripts/init_probe.py"}


def run_sweep(
    experiment: str,
    jobs: list[list[str]],
    dirs: list[str],
    out: Path,
    overrides: list[str],
    mode: str = "train",
) -> int:
    """``train.py -m`` (or the init probe's) in a subprocess, with a progress bar; its exit code.

    A run counts as done once it completed or diverged, or once its summary.json is rewritten:
    a failed or killed run from an earlier attempt runs again."""
    cmd = [sys.executable, str(ROOT / ENTRIES[mode]), "-m", f"experiment={experiment}"]
    cmd += [f"hydra.sweep.dir={hydra_quoted(str(out))}", *overrides]
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
                    if (
                        k not in done
                        and status not in (Status.RUNNING, Outcome.UNFINISHED)
                        and fresh
                    ):
                        done.add(k)
                        what = " ".join(j for j in jobs[k] if j.partition("=")[0] in varying)
                        pace = eta(started, len(done - before_done), len(jobs) - len(done))
                        line = run_line(out / dirs[k], k, len(jobs), what, status, pace)
                        console.print(f"  {line}", markup=False)
                running = [str(k) for k, (status, _) in states.items() if status == "running"]
                label = f"runs (running: {', '.join(running)})" if running else "runs"
                bar.update(task, completed=len(done), description=label)
                if code is not None:
                    return code
                time.sleep(1.0)


def run_line(run: Path, k: int, n: int, what: str, status: str, pace: str) -> str:
    """One finished job: which, how it ended, its best val loss, the time so far and left."""
    best = (run_summary(run) or {}).get("best_val_loss")
    loss = f", best val {best:.4f}" if isinstance(best, int | float) else ""
    return f"run {k + 1}/{n}: {what} -> {status}{loss} [{pace}]"


def eta(started: float, new: int, left: int) -> str:
    """Elapsed time, and what is left at the pace of the jobs finished in this launch."""
    spent = time.perf_counter() - started
    return f"{clock(spent)} elapsed, ~{clock(spent / max(new, 1) * left)} left"


# --- who may use a sweep dir ------------------------------------------------------------------
OWNER = ".reproduce.json"  # <sweep dir>/.reproduce.json: the experiment and overrides it holds


def claim_sweep_dir(out: Path, experiment: str, overrides: list[str], dry_run: bool) -> str | None:
    """Why this command may not use ``out`` (None: it may): a sweep dir records the experiment
    and overrides that made it, and another finding's or another setting's sweep is refused,
    so its runs are never pooled into these verdicts nor its verdicts replaced. A dir from
    before the record is adopted (one line says so)."""
    path, wanted = out / OWNER, {"experiment": experiment, "overrides": grid_of(overrides)}
    try:
        owner = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        owner = None
    if isinstance(owner, dict):
        held = {"experiment": owner.get("experiment"), "overrides": owner.get("overrides") or []}
        if {**held, "overrides": grid_of(held["overrides"])} != wanted:
            made = " ".join([f"experiment={held['experiment']}", *held["overrides"]])
            return (
                f"{out} holds the sweep of {made}, not of experiment={experiment} "
                f"{' '.join(overrides)}; pick another --out, or rerun with that experiment's "
                "overrides"
            )
    if dry_run or owner is not None:
        return None
    if out.is_dir() and any(out.glob(f"*/{runfiles.SUMMARY}")):
        console.print(f"  {out}: recording experiment={experiment} as its sweep", markup=False)
    try:
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(wanted) + "\n")
    except OSError as err:
        why = err.strerror or err
        return f"cannot write {out} ({why}); free space, fix its permissions or pick another --out"
    return None


def busy(out: Path) -> str | None:
    """Why ``out`` cannot take a sweep now (another sweep holds its lock, named by PID), or None;
    said here in one line, not only in sweep.log once the sweep stopped."""
    if not out.is_dir():
        return None
    lock = RunDirLock(out, "sweep dir", "another --out")
    try:
        lock.acquire()
    except Refused as err:
        return str(err)
    except OSError as err:
        return f"cannot write {out} ({err.strerror}); fix its permissions or pick another --out"
    lock.release()
    return None


def grid_of(overrides: list[str]) -> list[str]:
    """The overrides as the grid they make: sorted, each value list sorted and deduplicated,
    so ``seed=1,0`` and ``seed=0,1`` name one sweep (a bracketed or quoted value kept as is)."""
    out = []
    for item in overrides:
        key, sep, value = str(item).partition("=")
        if sep and "," in value and not any(c in value for c in "[]{}()'\""):
            value = ",".join(sorted({v.strip() for v in value.split(",")}))
        out.append(f"{key.strip()}{sep}{value}")
    return sorted(out)
