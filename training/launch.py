"""How train.py meets its launchers: the command line, DDP's child processes, and sweeps.

- ``check_choices``: an unknown config-group option on the command line fails in one line that
  lists the valid ones (Hydra's own message spans a page).
- ``launch_scope``: Lightning's DDP launcher starts each extra process by re-running the
  command line. Under ``-m`` that line is the whole sweep, so every child would start a sweep of
  its own in new dirs. While a multirun job trains, the line it replays is the job's own
  overrides (no ``-m``) and Hydra's run dir is the job's dir, so each child joins that one job.
  After the job, the process group and the launcher's environment go, so the next job of the
  sweep launches its own processes.
- ``SweepStatus``: a failed job does not stop a sweep (train.py records it and goes on); at
  the end this Hydra callback lists the sweep's jobs by status and exits non-zero if any failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback as HydraCallback
from omegaconf import DictConfig, read_write

CONF = Path(__file__).resolve().parents[1] / "conf"


class ChoiceError(ValueError):
    """An unknown config-group option; the message lists the valid ones."""


def group_options(group: str, conf: Path = CONF) -> list[str]:
    return sorted(p.stem for p in (conf / group).glob("*.yaml"))


def check_choices(args: Sequence[str], conf: Path = CONF) -> None:
    """Raise ChoiceError for the first ``group=option`` (or sweep ``group=a,b``) naming an option
    that ``conf/<group>/`` lacks. Hydra's own groups (hydra/...) and malformed overrides are
    left to Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    candidates = [a for a in args if "=" in a and not a.startswith("-")]
    try:
        overrides = OverridesParser.create().parse_overrides(candidates)
    except Exception:  # Hydra reports syntax errors itself
        return
    for override in overrides:
        group = override.key_or_group
        if override.is_delete() or group.startswith("hydra") or not (conf / group).is_dir():
            continue
        if override.is_sweep_override():
            values = list(override.sweep_string_iterator())
        else:
            values = [override.get_value_element_as_str()]
        options = group_options(group, conf)
        for value in values:
            if value not in options and value != "null":
                raise ChoiceError(
                    f"unknown {group} '{value}'; choose one of: {', '.join(options)} "
                    f"({group}=<name>)"
                )


# --- DDP child processes under -m ----------------------------------------------------------
def in_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


# What Lightning's DDP launcher sets in its own process's environment, and never unsets: left
# there, the next job of a sweep would take LOCAL_RANK for a process started from outside and
# wait for ranks that nobody starts.
LAUNCH_ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")


@contextlib.contextmanager
def launch_scope(run_dir: Path) -> Iterator[None]:
    """One job's distributed lifetime: inside, a multirun job's sys.argv and hydra.run.dir
    describe that job alone (see the module docstring); on the way out the DDP process group
    is torn down and the launcher's environment variables are restored."""
    env = {k: os.environ.get(k) for k in LAUNCH_ENV}
    argv = sys.argv
    hydra_cfg = None
    if in_multirun():
        from hydra.core.hydra_config import HydraConfig

        hydra_cfg = HydraConfig.get()
        sys.argv = [argv[0], *hydra_cfg.overrides.task]
        with read_write(hydra_cfg):
            old_dir, hydra_cfg.run.dir = hydra_cfg.run.dir, str(run_dir)
    try:
        yield
    finally:
        end_process_group()
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        sys.argv = argv
        if hydra_cfg is not None:
            with read_write(hydra_cfg):
                hydra_cfg.run.dir = old_dir


def end_process_group() -> None:
    """Lightning leaves the DDP process group up after a fit; the next job of a sweep starts
    new processes, which must not meet the old group."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def launched_as_rank_zero() -> bool:
    """Rank zero of a distributed launch, read from the launchers' environment (torchrun, SLURM
    tasks, Lightning's own child processes) before any process group exists; True when alone."""
    keys = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_PROCID")
    return all(int(os.environ.get(k, "0") or 0) == 0 for k in keys)


# --- the end of a sweep ----------------------------------------------------------------------
def sweep_statuses(sweep_dir: Path) -> dict[Path, dict[str, Any]]:
    """Each job dir's summary (status 'unfinished' when it has none)."""
    out: dict[Path, dict[str, Any]] = {}
    jobs = [
        p for p in sweep_dir.iterdir() if (p / ".hydra").is_dir() or (p / "summary.json").is_file()
    ]
    for job in sorted(jobs):
        try:
            out[job] = json.loads((job / "summary.json").read_text())
        except (OSError, ValueError):
            out[job] = {"status": "unfinished"}
    return out


class SweepStatus(HydraCallback):
    """After a multirun: one line of status counts, one line per failed job, and exit code 1
    when any job failed or left no summary (each job's error is in its summary.json)."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if not sweep_dir.is_dir() or not launched_as_rank_zero():
            return
        statuses = sweep_statuses(sweep_dir)
        counts = Counter(s.get("status", "unfinished") for s in statuses.values())
        text = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        print(f"sweep {sweep_dir}: {text}", flush=True)
        bad = ("failed", "unfinished")
        failed = [(job, s) for job, s in statuses.items() if s.get("status") in bad]
        for job, summary in failed:
            why = summary.get("error", "no summary.json: killed, or still running")
            print(f"  {summary['status']}: {job.name}: {why}", flush=True)
        if failed:
            raise SystemExit(1)
