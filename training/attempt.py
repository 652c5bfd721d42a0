"""One attempt at a run in its run dir: who may write it, what to do with it, and its record.

    summary.json says completed or diverged   -> skipped: its summary is returned, nothing runs
    last.ckpt exists                          -> the fit continues from it
    otherwise                                 -> the fit starts at step 0

``resume=false`` starts fresh: the old attempt's checkpoints, metrics.csv and summary.json move to
``<run_dir>/checkpoints/superseded-<time>/`` first, as they do when ``ckpt_path=`` continues
another run's checkpoint into a dir that holds an attempt of its own. A run dir remembers the
settings that produced it (summary.json and every checkpoint hold them); skipping, resuming or
continuing with settings that would change the result is refused with the differing keys named,
so a run is never mislabelled. Operational keys (threads, logging, checkpoint cadence, ...) may
differ; a different thread count changes the last digits of a resumed run (docs/reliability.md).

One process writes a run dir at a time: an exclusive ``flock`` on ``<run_dir>/.lock`` is held
for the whole attempt and released by the OS when the process dies, so an orphaned sweep worker
or a second train.py is refused in one line naming the holder's PID. Hydra's copy of the config
(``.hydra/``) is written here, only by an attempt that trains, so a refused or skipped rerun
leaves a finished run's files exactly as they were.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from runs.dirlock import RunDirLock
from runs.errors import ConfigError, Refused
from runs.record import RunRecord, finished, read_summary
from runs.runfiles import (
    ATTEMPT_FILES,
    CHECKOUT,
    CHECKPOINT,
    CONFIG,
    HYDRA_DIR,
    HYDRA_META,
    SUMMARY,
    flatten,
    write_atomic,
)
from runs.settings import is_operational
from training.context import launched_as_rank_zero
from training.errors import BUILD_ERRORS, SIGNALS, Interrupted, signals_interrupt
from training.reliability.checkpoints import check_fits, disk_error, read_checkpoint, resume_state
from training.specs import MODELS


# --- the settings that decide a result -------------------------------------------------------
def fingerprint(cfg: DictConfig) -> dict[str, Any]:
    """The flattened resolved config minus the keys that leave the result unchanged, plus the
    switches outside it that change the numbers (the fused kernels). The build adds the data's
    identity (``data.identity``: the cache entry and its files' checksums)."""
    config = OmegaConf.to_container(cfg, resolve=True)
    flat = flatten({k: v for k, v in config.items() if k != "hydra"})
    settings = {k: v for k, v in flat.items() if not is_operational(k)}
    settings["kernels.fused"] = os.environ.get("NORMLAB_FUSED_KERNELS", "1") != "0"
    return settings


def config_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: old -> new`` for each key whose value differs. A key the older record lacks (added
    by an upgrade) compares at its field's default, or not at all when no typed field has one;
    a key this version lacks (removed, or recorded only after the build) is not compared."""
    from training.run_config import record_defaults

    defaults, changes = record_defaults(), []
    for k in sorted(set(new)):
        if k not in old and k not in defaults:
            continue
        was = old[k] if k in old else defaults[k]
        if json.dumps(was, default=str) != json.dumps(new[k], default=str):
            changes.append(f"{k}: {was} -> {new[k]}")
    return changes


def check_same_config(where: str, old: dict | None, new: dict[str, Any], fix: str) -> None:
    if old is None:  # written before run dirs recorded their config
        return
    changes = config_changes(old, new)
    if changes:
        shown = "; ".join(changes[:3]) + (f"; and {len(changes) - 3} more" if changes[3:] else "")
        raise Refused(f"{where} was written with other settings ({shown}); {fix}")


RERUN_FIX = (
    "rerun with the same settings, pick another run dir (hydra.run.dir=... / "
    "hydra.sweep.dir=...), or pass resume=false to start fresh there"
)
CKPT_FIX = (
    "ckpt_path continues a run with the settings it was trained with: pass those, or start a "
    "new run without ckpt_path"
)


# --- what a run dir holds, and what to do with it -------------------------------------------
@dataclass
class Plan:
    done_before: dict | None = None  # the summary of a run that finished before: skip
    ckpt_path: Path | None = None  # continue from this checkpoint
    ckpt: dict | None = None  # its contents (read up front: a bad file fails in seconds)
    set_aside: bool = False  # move the dir's previous attempt aside before starting


def plan(run_dir: Path, resume: bool, ckpt_path: str | None, config: dict) -> Plan:
    """What this attempt does with ``run_dir``. Raises ConfigError (one line) for an unreadable
    checkpoint or settings that would change the result."""
    own = run_dir / CHECKPOINT
    if ckpt_path:
        path = Path(ckpt_path).resolve()
        ckpt = read_checkpoint(path)
        old = resume_state(ckpt).get("run_config")
        check_same_config(f"checkpoint {path}", old, config, CKPT_FIX)
        # Another run's checkpoint starts a new attempt here: this dir's own files go aside.
        return Plan(ckpt_path=path, ckpt=ckpt, set_aside=path != own.resolve())
    if not resume:
        return Plan(set_aside=True)
    summary = read_summary(run_dir / SUMMARY)
    if finished(summary):
        where = f"{run_dir} (a {summary['status']} run)"
        check_same_config(where, summary.get("run_config"), config, RERUN_FIX)
        return Plan(done_before=summary)
    if not own.is_file():
        return Plan()
    ckpt = read_checkpoint(own)
    check_same_config(f"checkpoint {own}", resume_state(ckpt).get("run_config"), config, RERUN_FIX)
    return Plan(ckpt_path=own, ckpt=ckpt)


def set_aside(run_dir: Path) -> Path | None:
    """Move a previous attempt's files to checkpoints/superseded-<time>/."""
    found = sorted({p for pattern in ATTEMPT_FILES for p in run_dir.glob(pattern) if p.is_file()})
    if not found:
        return None
    dest = run_dir / "checkpoints" / time.strftime("superseded-%Y%m%d-%H%M%S")
    dest.mkdir(parents=True, exist_ok=True)
    for path in found:
        shutil.move(str(path), dest / path.name)
    return dest


# --- one writer per run dir ------------------------------------------------------------------
def write_hydra_files(run_dir: Path, cfg: DictConfig) -> None:
    """``.hydra/{config,overrides,hydra}.yaml`` as Hydra would write them (hydra.output_subdir
    is null so that only an attempt that trains writes them)."""
    from hydra.core.hydra_config import HydraConfig

    out = run_dir / HYDRA_DIR
    out.mkdir(exist_ok=True)
    files = {run_dir / CONFIG: cfg}
    if HydraConfig.initialized():
        hydra_cfg = HydraConfig.get()
        files[run_dir / HYDRA_META] = OmegaConf.create({"hydra": hydra_cfg})
        files[out / "overrides.yaml"] = hydra_cfg.overrides.task
    for path, node in files.items():  # each whole or not at all: a full disk leaves no empty
        write_atomic(path, OmegaConf.to_yaml(node))  # config.yaml for a reader to count as a run


# The code that computes a run's numbers: its digest is the run's code_version, so a report can
# say when a variant pools runs of different code (a sweep resumed after an edit).
CODE_DIRS = ("models", "data", "runs", "training")


@functools.cache
def code_version() -> str:
    """A short digest of the Python (and C++) sources of the harness, the run-dir contract,
    models and data, and of train.py: equal for runs of the same code whether or not it is a
    git checkout."""
    digest = hashlib.sha256()
    files = [CHECKOUT / "train.py"] + [
        p for d in CODE_DIRS for p in (CHECKOUT / d).rglob("*") if p.suffix in (".py", ".cpp")
    ]
    for path in sorted(f for f in files if f.is_file()):
        digest.update(path.relative_to(CHECKOUT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def initial_results(cfg: DictConfig, run_dir: Path) -> dict:
    """The results summary.json holds whatever happens to the run: what it is, as configured
    (even values of the wrong type: the run then fails on them), and every measurement unset,
    the model kind's own too (its spec's ``summary_fields``; none for an unknown kind, which the
    typed config refuses)."""
    identity = {
        "name": cfg.name,
        "model": cfg.model.name,
        "placement": cfg.placement.name,
        "norm": cfg.norm.name,
        "n_layer": cfg.model.n_layer,
        "n_embd": cfg.model.n_embd,
        "lr": cfg.optim.lr,
        "warmup_steps": cfg.optim.warmup_steps,
        "seed": cfg.seed,
    }
    results = {
        k: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for k, v in identity.items()
    }
    results.update(
        steps=0,
        final_train_loss=None,
        final_val_loss=None,
        best_val_loss=None,
        wall_s=None,
        run_dir=str(run_dir),
        params=None,
        resumed_from_step=None,
        code_version=code_version(),
    )
    spec = MODELS.get(cfg.model.name) if isinstance(cfg.model.name, str) else None
    return {**results, **dict.fromkeys(spec.summary_fields if spec is not None else ())}


class Attempt:
    """This process's attempt at the run ``cfg`` describes (see the module docstring):

        with Attempt(cfg) as run:              # config checked, dir locked, plan made
            if run.done_before is None:        # else skipped: done_before is its summary
                ...                            # train, reporting to run.record
        # leaving: the outcome (failed with the error, interrupted on a signal) goes into
        # summary.json (rank zero) and the dir is released

    A signal anywhere inside ends the block as ``Interrupted`` (exit 143 / 130).
    """

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg
        self.rank_zero = launched_as_rank_zero()
        self.run_dir = Path(cfg.run_dir)
        self.lock = RunDirLock(self.run_dir)
        self.record = RunRecord()
        self.started = time.perf_counter()
        self._signals = contextlib.ExitStack()

    def __enter__(self) -> Attempt:
        from runs.schema import check_top_level
        from training.sections import read_trainer

        check_top_level(self.cfg)
        read_trainer(self.cfg.trainer)  # a trainer this machine cannot run: before the dir opens
        self.settings = fingerprint(self.cfg)
        self._signals.enter_context(signals_interrupt())
        try:
            self.open()
        except BaseException:
            self._signals.close()
            raise
        if self.done_before is not None:
            status = self.done_before["status"]
            print(f"skip {self.run_dir}: already {status} (resume=false reruns it)")
        return self

    def __exit__(self, kind, error, traceback) -> None:
        try:
            self.close(error)
        finally:
            self._signals.close()

    def open(self) -> None:
        """Lock the dir (rank zero), decide the plan, prepare the dir if this attempt trains."""
        if self.rank_zero:
            try:
                self.run_dir.mkdir(parents=True, exist_ok=True)
                self.lock.acquire()
            except OSError as err:
                raise ConfigError(str(disk_error(err, self.run_dir / ".lock"))) from err
        try:
            try:
                self.plan = plan(self.run_dir, self.cfg.resume, self.cfg.ckpt_path, self.settings)
            except ConfigError:
                raise
            except BUILD_ERRORS as err:  # an unreadable or missing checkpoint
                raise ConfigError(str(err)) from err
            results = initial_results(self.cfg, self.run_dir)
            self.record.results = {**results, "run_config": self.settings}
            if self.plan.done_before is None and self.rank_zero:
                if self.plan.set_aside:
                    set_aside(self.run_dir)
                write_hydra_files(self.run_dir, self.cfg)
        except BaseException:
            self.lock.release()
            raise

    @property
    def done_before(self) -> dict | None:
        """The summary of a run that finished before this attempt, which then skips it."""
        return self.plan.done_before

    @property
    def summary(self) -> dict:
        """What the run dir's summary.json holds (or will hold) after this attempt."""
        return self.done_before if self.done_before is not None else self.record.summary()

    def admit(self, task: Any, inputs: dict[str, str | None]) -> None:
        """Check what the build made against the checkpoint this attempt continues, and record
        it with the run's settings. ``inputs``: setting -> digest of the files the run reads
        (``data.identity``: the corpus or image files and the tokenizer; ``model.init_from.sha256``:
        the init checkpoint), each refused when the checkpoint recorded another (a file edited
        or swapped since); None: not on this machine, so a resume keeps the recorded one (it
        reads its weights from its own checkpoint). ``task``'s weights must have the names and
        shapes of the checkpoint's (training/reliability/checkpoints.py: ``check_fits``)."""
        plan = self.plan
        old = resume_state(plan.ckpt).get("run_config") if plan.ckpt is not None else None
        own = plan.ckpt_path == self.run_dir / CHECKPOINT
        for key, identity in inputs.items():
            if identity is None and old is not None:
                identity = old.get(key)
            if old is not None and key in old:
                check_same_config(
                    f"checkpoint {plan.ckpt_path}",
                    {key: old[key]},
                    {key: identity},
                    RERUN_FIX if own else CKPT_FIX,
                )
            self.settings[key] = identity
        if plan.ckpt is not None:
            check_fits(plan.ckpt_path, plan.ckpt, task)

    def close(self, error: BaseException | None = None) -> None:
        """Record the outcome in summary.json (rank zero) and release the dir."""
        try:
            if self.rank_zero:
                drop_empty_job_log(self.run_dir)
            if self.done_before is not None:
                return
            if isinstance(error, Interrupted):  # data preparation, the final validation, ...
                self.record.interrupt(error.signum)
            elif error is not None:
                self.record.fail(error)
            self.record.results["wall_s"] = round(time.perf_counter() - self.started, 2)
            if self.rank_zero:
                # Whole or not at all: a signal during the write waits until it is done.
                signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
                try:
                    self.record.write(self.run_dir / SUMMARY)
                except OSError as err:
                    raise disk_error(err, self.run_dir / SUMMARY) from err
                finally:
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        finally:
            self.lock.release()


def drop_empty_job_log(run_dir: Path) -> None:
    """Hydra opens ``<job name>.log`` in the run dir for Python logging, which a run does not
    use (it prints its header, progress and result): an empty one is removed, one that holds
    anything is kept."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return
    log = run_dir / f"{HydraConfig.get().job.name}.log"
    with contextlib.suppress(OSError):
        if log.stat().st_size == 0:
            log.unlink()
