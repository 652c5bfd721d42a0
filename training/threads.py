"""How many torch CPU threads a run takes: the cores no other process keeps busy, shared with
the other jobs of a parallel sweep (``num_threads`` overrides it).
"""

from __future__ import annotations

import os
import time

import torch


def parallel_sweep() -> bool:
    """Whether this job runs beside others (a multirun on the joblib launcher)."""
    return parallel_jobs() > 1


def parallel_jobs() -> int:
    """How many jobs of this sweep run at once: the joblib launcher's n_jobs (-1: every core),
    else 1."""
    from hydra.core.hydra_config import HydraConfig

    from training.context import in_multirun

    if not in_multirun():
        return 1
    launcher = HydraConfig.get().launcher
    if "joblib" not in str(launcher.get("_target_", "")):
        return 1
    n = launcher.get("n_jobs") or 1
    return max(1, os.cpu_count() or 1) if n == -1 else max(1, int(n))


def busy_cores(window_s: float = 0.25) -> float | None:
    """How many CPUs other processes keep busy now: the non-idle share of /proc/stat's CPU time
    over ``window_s`` (this process sleeps meanwhile), times the CPU count; None off Linux."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(window_s)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    if total1 <= total0:
        return None
    return (1 - (idle1 - idle0) / (total1 - total0)) * (os.cpu_count() or 1)


def default_threads(jobs_beside: int = 1) -> int:
    """The cores this process may use that no other process keeps busy, shared with the jobs
    of a parallel sweep: two threads on a core another process holds wait on each other at
    every op (100 steps of the default job on 2 cores beside 2 busy ones: 113 s on 2 threads,
    56 s on 1, medians in docs/benchmarks.md)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    if jobs_beside > 1:
        return max(1, cores // jobs_beside)
    busy = busy_cores()
    return cores if busy is None else max(1, min(cores, round(cores - busy)))


def set_threads(num_threads: int | None) -> int:
    """``num_threads`` torch CPU threads, or ``default_threads()`` when it is null."""
    n = num_threads or default_threads(parallel_jobs())
    torch.set_num_threads(n)
    return n
