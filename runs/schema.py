"""The root of the config, declared once: every key train.py's config may hold at its root, what
kind of key it is, a scalar's type, and which settings leave a run's result alone.

Kinds: a ``group`` is chosen by option (``placement=post``, conf/<group>/) and holds settings; a
``section`` holds settings set in conf/config.yaml or by an experiment (``probes.every``); a
``scalar`` is one value (``seed=1``); ``package`` keys name options whose content lands at the
root (``experiment=f3_depth``) or is Hydra's own. The command line's preflight
(training/launch.py), the composed config's root check (check_top_level, below) and
the result-deciding settings (runs/settings.py: OPERATIONAL) all derive from ROOT;
tests/training/test_schema.py holds conf/config.yaml and conf/'s groups to it. Torch-free, so
the command line is checked before anything heavy is imported.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from runs.checks import closest, setting_ok, type_error, type_ok
from runs.errors import ConfigError

KINDS = ("group", "section", "scalar", "package")


@dataclass(frozen=True)
class Key:
    kind: str  # KINDS
    type: Any = None  # a scalar's type (a typing hint)
    # Whether the key leaves a run's result alone (threads, loggers, probes): True for the whole
    # key, or the sub-keys that do (trainer.accelerator); such keys may differ between a run's
    # attempts and never name a sweep's job dir.
    operational: bool | tuple[str, ...] = False


# Lightning Trainer arguments that change how a run is carried out, not what it computes.
TRAINER_OPERATIONAL = (
    "accelerator", "strategy", "deterministic", "benchmark", "detect_anomaly",
    "enable_progress_bar", "enable_model_summary", "enable_checkpointing", "log_every_n_steps",
)  # fmt: skip

ROOT: dict[str, Key] = {
    "data": Key("group", operational=("num_proc", "cache_dir")),  # the cache's content is recorded
    "model": Key("group"),
    "placement": Key("group"),
    "norm": Key("group"),
    "param": Key("group"),
    "optim": Key("group"),
    "trainer": Key("group", operational=TRAINER_OPERATIONAL),
    "logger": Key("group", operational=True),
    "checkpoint": Key("section", operational=True),
    "probes": Key("section", operational=True),
    "divergence": Key("section"),
    "init_probe": Key("section", operational=True),  # scripts/init_probe.py's grid
    "reproduce": Key("section", operational=True),  # judged after the runs, not part of them
    "callbacks": Key("section", operational=True),
    "pack": Key("section", operational=True),  # which GPU a sweep job takes (training/packing.py)
    "seed": Key("scalar", int),
    "name": Key("scalar", str, operational=True),
    "group": Key("scalar", str | None, operational=True),
    "study": Key("scalar", str, operational=True),
    "run_dir": Key("scalar", str, operational=True),
    "num_threads": Key("scalar", int | None, operational=True),
    "compile": Key("scalar", bool | str | None, operational=True),
    "resume": Key("scalar", bool, operational=True),
    "ckpt_path": Key("scalar", str | None, operational=True),
    "debug": Key("scalar", bool, operational=True),
    "experiment": Key("package"),
    "hparams_search": Key("package"),
    "hydra": Key("package"),
}


def keys_of(kind: str) -> tuple[str, ...]:
    """The root keys of one kind, in ROOT's order."""
    return tuple(k for k, key in ROOT.items() if key.kind == kind)


def operational_keys() -> tuple[str, ...]:
    """The dotted keys that leave a run's result alone: whole root keys, or their sub-keys."""
    out: list[str] = []
    for name, key in ROOT.items():
        if key.operational is True:
            out.append(name)
        elif key.operational:
            out += [f"{name}.{sub}" for sub in key.operational]
    return tuple(out)


# --- the root of the config ------------------------------------------------------------------
SCALARS: dict[str, Any] = {k: ROOT[k].type for k in keys_of("scalar")}
SEED_MAX = 2**32 - 1


def check_top_level(cfg: DictConfig) -> None:
    """Unknown root keys, and root scalars of the wrong type or range, in one line each."""
    valid = tuple(ROOT)
    for key in cfg:
        if key not in valid:
            raise ConfigError(
                f"unknown setting '{key}'{closest(key, valid)}; remove it, or use one of: "
                f"{', '.join(sorted(k for k in valid if k != 'hydra'))}"
            )
    for key, hint in SCALARS.items():
        value = OmegaConf.select(cfg, key, throw_on_missing=False)
        if key in cfg and not OmegaConf.is_missing(cfg, key) and not setting_ok(value, hint):
            raise ConfigError(type_error(key, value, hint))
    if not 0 <= cfg.seed <= SEED_MAX:
        raise ConfigError(f"seed must be in [0, {SEED_MAX}] (numpy's range), got {cfg.seed}")
    cores = os.cpu_count() or 1
    if cfg.num_threads is not None and not 1 <= cfg.num_threads <= cores:
        raise ConfigError(
            f"num_threads must be in [1, {cores}] (this machine's cores) or null (the free "
            f"cores), got {cfg.num_threads}; more threads than cores only slow a run down"
        )
    batch = cfg.data.get("batch_size")
    if not type_ok(batch, int) or not 1 <= batch <= 1_000_000:
        raise ConfigError(f"data.batch_size must be an integer in [1, 1000000], got {batch!r}")
