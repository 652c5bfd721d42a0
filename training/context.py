"""Where this process runs, read from Hydra and the launchers' environment: a job of a Hydra
multirun, rank zero of a distributed launch, a parallel sweep's worker whose sweep is gone.
"""

from __future__ import annotations

import os
import threading

# Set in a parallel sweep's worker process once the sweep's own process is gone.
SWEEP_GONE = threading.Event()


def in_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def launched_as_rank_zero() -> bool:
    """Rank zero of a distributed launch, read from the launchers' environment (torchrun, SLURM
    tasks, Lightning's own child processes) before any process group exists; True when alone."""
    keys = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_PROCID")
    return all(int(os.environ.get(k, "0") or 0) == 0 for k in keys)


def sweep_gone() -> bool:
    """A module function, not the Event itself, in the error policy's wrapper: joblib pickles
    the wrapper by value, and an Event does not pickle."""
    return SWEEP_GONE.is_set()
