"""A sweep as a whole: its grid, the checks made before any job starts, each job's outcome and
the status line at its end, and what a searching sweeper (Optuna) gets back from a job.

- ``grid``: the jobs, as Hydra's basic sweeper expands params and overrides (public parser only).
- ``check_distinct_dirs`` / ``check_grid_once``: two jobs that would share a run dir, or a grid
  whose every job fails the same check, are refused once, before any job starts.
- ``SweepStatus``: a failed job does not stop a sweep (train.py records it and goes on); at
  the end this Hydra callback counts what this launch's jobs did (completed, diverged, skipped,
  refused, failed) and exits non-zero if any job failed, was refused or never ended.
- ``for_the_sweeper``: a search minimizes each trial's final val loss; the status line still
  counts the trials.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback as HydraCallback
from hydra.types import RunMode
from omegaconf import DictConfig

from runs.errors import ConfigError
from runs.jobs import grid, job_dir, sweep_constants
from runs.record import BAD_OUTCOMES, Outcome
from training.context import launched_as_rank_zero
from training.launch import SWEEP_PID
from training.packing import read_pack

OUTCOMES = ".jobs"  # <state dir>/.jobs/<job dir name>.json: what each job of this launch did
SWEEP_START = "NORMLAB_SWEEP_START"  # the launch's start (time.time()), for the progress line
SWEEP_JOBS = "NORMLAB_SWEEP_JOBS"  # how many jobs the launch runs, for the progress line
LAUNCH = ".launch.json"  # both, in the state dir


def state_dir(config: DictConfig) -> Path:
    """Where this launch keeps its lock and its jobs' records: the sweep dir, or below it the
    dir of its shard (``pack.shard``), so shards of one sweep run at once."""
    return read_pack(config).state_dir(config.hydra.sweep.dir)


def another_shard(cfg: Any, job_num: int) -> bool:
    """Job ``job_num`` belongs to another shard's launch (``pack.shard``): here it runs nothing
    and records nothing."""
    return read_pack(cfg).elsewhere(job_num)


def check_grid_once(config: DictConfig) -> None:
    """Put the grid's jobs through the checks a job makes before it trains (composing it, then
    every key and value, torch-free: run_config.check_config), until one passes; when none
    does, refuse the sweep once, before any job starts or the sweep dir records anything,
    instead of once per job."""
    from hydra import compose
    from omegaconf import open_dict

    from training.arms import drop
    from training.run_config import check_config

    messages: list[str] = []
    for job in sweep_jobs(config):
        try:
            # run_dir stands in for Hydra's output dir, which no job has yet
            cfg = compose(
                config.hydra.job.config_name, [*job, "run_dir=-"], return_hydra_config=True
            )
            drop(cfg, job, cfg.hydra.runtime.choices)  # what the job leaves out (arms.py)
            with open_dict(cfg):
                del cfg["hydra"]
            check_config(cfg, quiet=True)
        except ConfigError as err:
            messages.append(str(err))
        except Exception as err:  # noqa: BLE001 - Hydra's composition errors, in one line
            text = str(err).strip().splitlines()
            messages.append(f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": "))
        else:
            return
    if not messages:
        return
    with contextlib.suppress(OSError):  # the empty dir Hydra made for it: a refusal leaves none
        Path(config.hydra.sweep.dir).rmdir()
    if len(set(messages)) == 1:
        raise SystemExit(f"error: every job of this sweep fails the same check: {messages[0]}")
    raise SystemExit(
        f"error: no job of this sweep passes its checks ({len(messages)} jobs); the first: "
        f"{messages[0]}"
    )


def outcome_path(sweep_dir: Path, job_dir: str, num: int) -> Path:
    """One record per job of this launch, numbered: two jobs never share one."""
    return sweep_dir / OUTCOMES / f"{num:05d}-{Path(job_dir).name}.json"


def sweep_jobs(config: DictConfig) -> list[list[str]]:
    """The jobs of the sweep this launch runs (see ``grid``)."""
    return grid(config.hydra.sweeper.get("params"), config.hydra.overrides.task)


def grid_or_none(config: DictConfig) -> list[list[str]] | None:
    """The sweep's jobs, or None for a grid only Hydra's own sweeper can expand."""
    try:
        return sweep_jobs(config)
    except Exception:  # noqa: BLE001 - Hydra's sweeper reports its own grid's errors
        return None


def check_distinct_dirs(jobs: list[list[str]], constants: dict) -> None:
    """Two jobs of one grid that differ only in keys the dir name leaves out (threads,
    loggers, ...) would share one run dir: the second would be refused or skipped."""
    seen: dict[str, list[str]] = {}
    for job in jobs:
        name = job_dir(job, None, constants)
        if name in seen and seen[name] != job:
            differ = sorted(set(job) ^ set(seen[name]))
            raise SystemExit(
                f"error: jobs {', '.join(differ)} of this sweep share the run dir {name} "
                "(the dir name leaves out operational keys); sweep those keys in separate sweep "
                "dirs (hydra.sweep.dir=...)"
            )
        seen[name] = job


class SweepStatus(HydraCallback):
    """Each job of this launch records what it did (ran to completed / diverged / failed, or was
    skipped as finished, or refused); at the end one status line counts them, one line names
    each job that failed, was refused or never ended, and the exit code is 1 if any did."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            sweep_dir, own = Path(config.hydra.sweep.dir), state_dir(config)
        except (ConfigError, ValueError) as err:  # Hydra would swallow it as a warning
            raise SystemExit(f"error: {err}") from None
        jobs = None if searching(config) else grid_or_none(config)  # a search draws as it goes
        # the overrides every job shares stay out of the job dir names (runs/jobs.py)
        try:
            constants = sweep_constants(sweep_dir, jobs or [])
        except ConfigError as err:  # a garbled record: Hydra would swallow it as a warning
            raise SystemExit(f"error: {err}") from None
        if jobs is not None:
            check_distinct_dirs(jobs, constants)
            check_grid_once(config)
        if launched_as_rank_zero():  # one sweep at a time in a sweep dir (its .jobs/ too)
            from runs.dirlock import RunDirLock
            from runs.errors import Refused

            own.mkdir(parents=True, exist_ok=True)
            what = "sweep dir" if own == sweep_dir else "shard of the sweep dir"
            self._lock = RunDirLock(own, what, "another hydra.sweep.dir or pack.shard")
            try:
                self._lock.acquire()
            except Refused as err:
                raise SystemExit(f"error: {err}") from None
            sweep_constants(sweep_dir, jobs or [], record=True)
        shutil.rmtree(own / OUTCOMES, ignore_errors=True)
        os.environ[SWEEP_PID] = str(os.getpid())  # its worker processes follow it (launch_scope)
        os.environ[SWEEP_START] = str(time.time())  # for each job's progress line
        os.environ[SWEEP_JOBS] = str(launch_size(config) or "")
        # ... and in a file for jobs that do not inherit this process's environment (a Ray
        # cluster's workers were started before the launch)
        if launched_as_rank_zero():
            launch = {k: os.environ[k] for k in (SWEEP_START, SWEEP_JOBS)}
            (own / LAUNCH).write_text(json.dumps(launch))

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._write(config, {"outcome": str(Outcome.UNFINISHED)})  # replaced when the job ends

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        try:
            value = getattr(job_return.return_value, "record", job_return.return_value)
        except Exception as err:  # the job raised past train.py's own handling
            value = {"outcome": str(Outcome.FAILED), "error": f"{type(err).__name__}: {err}"}
        self._write(config, value if isinstance(value, dict) else {"outcome": str(Outcome.FAILED)})
        multirun = config.hydra.mode == RunMode.MULTIRUN and launched_as_rank_zero()
        if multirun and not another_shard(config, config.hydra.job.num):
            print(progress_line(config), flush=True)

    def _write(self, config: DictConfig, record: dict) -> None:
        if config.hydra.mode != RunMode.MULTIRUN or not launched_as_rank_zero():
            return
        if another_shard(config, config.hydra.job.num):
            return
        where = config.hydra.runtime.output_dir
        path = outcome_path(state_dir(config), where, config.hydra.job.num)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            self._status_line(config)
        finally:
            lock = getattr(self, "_lock", None)
            if lock is not None:
                lock.release()

    def _status_line(self, config: DictConfig) -> None:
        sweep_dir, own = Path(config.hydra.sweep.dir), state_dir(config)
        if not (own / OUTCOMES).is_dir() or not launched_as_rank_zero():
            return
        records = job_records(own)
        counts = Counter(str(r.get("outcome", Outcome.FAILED)) for r in records.values())
        if searching(config):
            mark_a_search_without_results(sweep_dir, records.values())
        text = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
        shard = f" (shard {read_pack(config).shard})" if own != sweep_dir else ""
        print(f"sweep {sweep_dir}{shard}: {text}", flush=True)
        bad = [r for r in records.values() if r.get("outcome") in BAD_OUTCOMES]
        for record in bad:
            why = record.get("error", "no outcome: killed, or still running")
            print(f"  {record.get('outcome')}: {record['job']}: {why}", flush=True)
        if bad:
            raise SystemExit(1)


def launch_size(config: DictConfig) -> int | None:
    """The jobs this launch runs: its grid (its shard's part of it), or a search's trials; None
    when unknown."""
    if searching(config):
        return config.hydra.sweeper.get("n_trials")
    try:
        jobs = len(sweep_jobs(config))
    except Exception:  # noqa: BLE001 - a grid only Hydra's sweeper can expand
        return None
    pack = read_pack(config)
    return sum(not pack.elsewhere(num) for num in range(jobs))


def job_records(state: Path) -> dict[str, dict]:
    """This launch's job records (.jobs/ in its state dir), each with its job's dir name; one
    that cannot be read counts as unfinished."""
    records = {}
    for path in sorted((state / OUTCOMES).glob("*.json")):
        job = path.stem.split("-", 1)[-1]  # the job's dir name (after its number)
        try:
            records[path.stem] = {"job": job, **json.loads(path.read_text())}
        except (OSError, ValueError, TypeError):
            records[path.stem] = {"job": job, "outcome": str(Outcome.UNFINISHED)}
    return records


def progress_line(config: DictConfig) -> str:
    """``sweep: k of N jobs done (...), M min, ETA ~E min``: the jobs of this launch that ended
    (their records in .jobs/), the time since the launch began, and the rest at the mean time
    of the jobs that ran (a skipped job takes none)."""
    records = job_records(state_dir(config)).values()
    done = [str(r.get("outcome")) for r in records if r.get("outcome") != Outcome.UNFINISHED]
    launch = os.environ
    if SWEEP_START not in launch:  # a job on a Ray worker: the launch's own file
        with contextlib.suppress(OSError, ValueError):
            launch = json.loads((state_dir(config) / LAUNCH).read_text())
    total = int(launch.get(SWEEP_JOBS) or 0)
    start = float(launch.get(SWEEP_START) or time.time())
    minutes = (time.time() - start) / 60
    counts = ", ".join(f"{n} {o}" for o, n in sorted(Counter(done).items()))
    line = f"sweep: {len(done)} of {total or '?'} jobs done ({counts}), {minutes:.1f} min"
    ran = len(done) - done.count(str(Outcome.SKIPPED))
    if total and ran and len(done) < total:
        line += f", ETA ~{minutes / ran * (total - len(done)):.1f} min"
    return line


SEARCH_RESULTS = "optimization_results.yaml"  # what Hydra's Optuna sweeper writes at its end


def mark_a_search_without_results(sweep_dir: Path, records: Any) -> None:
    """A search none of whose trials finished (each failed: a bad value, a crash) has no best
    parameters, yet the sweeper writes the least bad WORST_OBJECTIVE trial as "best": replace
    that file with one that says so, so no one reads a failure's settings as the optimum."""
    finished = [r for r in records if r.get("status") in ("completed", "diverged")]
    path = sweep_dir / SEARCH_RESULTS
    if finished or not path.is_file():
        return
    path.write_text(
        "# normlab: no trial of this search finished (every one failed; see the .jobs/ records\n"
        "# and each trial's summary.json): there is no best value.\n"
        "best_params: null\nbest_value: null\nno_trial_finished: true\n"
    )
    print(f"  {path}: no trial finished; no best parameters recorded", flush=True)


def job_outcome(summary: dict, skipped: bool) -> dict:
    """What train.py returns to Hydra for a job: its outcome and status (see SweepStatus)."""
    status = summary.get("status")
    outcome = str(Outcome.SKIPPED) if skipped else status
    record = {"outcome": outcome, "status": status, "error": summary.get("error")}
    return {**record, "final_val_loss": summary.get("final_val_loss"),
            "init_loss": summary.get("init_loss")}  # fmt: skip


def searching(config: Any = None) -> bool:
    """Whether the sweep is a search (Optuna's sweeper, ...): its trials want a number back."""
    from hydra.core.hydra_config import HydraConfig

    if config is None:
        if not HydraConfig.initialized():
            return False
        config = HydraConfig.get()
    else:
        config = config.hydra
    target = str(config.sweeper.get("_target_", ""))
    return bool(target) and not target.endswith("BasicSweeper")


class Objective(float):
    """A trial's final val loss (objective_value), carrying the job's outcome record for
    SweepStatus."""

    record: dict


# What a trial that did not train to its end returns to the search: a documented worst value,
# never NaN (Optuna rejects NaN, and the Hydra sweeper then ends the whole search, with a
# traceback, at the first such trial). A diverged trial scores its loss at initialization
# (Wortsman et al. 2023's convention for LR sensitivity), a failed one WORST_OBJECTIVE.
WORST_OBJECTIVE = 1e6


def objective_value(record: dict) -> float:
    """The number a search minimizes for a job's outcome ``record`` (job_outcome)."""
    loss, start = record.get("final_val_loss"), record.get("init_loss")
    finite = lambda x: isinstance(x, int | float) and math.isfinite(x)  # noqa: E731
    if record.get("status") == "completed" and finite(loss):
        return float(loss)
    if record.get("status") == "diverged" and finite(start):
        return float(start)
    return WORST_OBJECTIVE


def for_the_sweeper(task: Callable[[Any], dict | None]) -> Callable[[Any], Any]:
    """A search gets each job's final val loss as the number it minimizes; other sweeps and
    single runs get the outcome record."""

    @functools.wraps(task)
    def wrapper(cfg: Any) -> Any:
        record = task(cfg) or {"outcome": str(Outcome.FAILED)}
        if not searching():
            return record
        value = Objective(objective_value(record))
        value.record = record
        return value

    return wrapper
