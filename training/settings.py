"""Which config keys decide a run's result: everything but the operational keys listed here.

Kept apart from training/rundir.py (which needs torch and Lightning for checkpoints) so that the
command line's checks and sweep dir names can use it before anything heavy is imported.
"""

from __future__ import annotations

# Config keys that do not change a run's result: they may differ between attempts.
OPERATIONAL = (
    "run_dir",
    "name",
    "group",
    "study",
    "resume",
    "ckpt_path",
    "debug",
    "num_threads",
    "compile",
    "logger",
    "callbacks",
    "checkpoint",
    "probes",
    "reproduce",  # experiments' verdict settings: judged after the runs, not part of them
    "init_probe",
    "trainer.accelerator",
    "trainer.strategy",
    "trainer.deterministic",
    "trainer.benchmark",
    "trainer.detect_anomaly",
    "trainer.enable_progress_bar",
    "trainer.enable_model_summary",
    "trainer.enable_checkpointing",
    "trainer.log_every_n_steps",
    "data.num_proc",  # tokenizing processes: the same token files
    "data.cache_dir",  # where the cache lives; its content is recorded as data.identity
)


def is_operational(key: str) -> bool:
    """Whether a dotted config key is (or lies under) one of the OPERATIONAL keys."""
    return any(key == s or key.startswith(s + ".") for s in OPERATIONAL)
