"""A sweep's jobs and the names of their run dirs: the grid Hydra's basic sweeper expands, and
each job's directory name (what it runs, not its place in the sweep). The harness names its
jobs' dirs with these; reproduce finds them again with the same ones. Torch-free."""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Sequence
from typing import Any

from omegaconf import OmegaConf

from runs.settings import is_operational


def path_safe(name: str) -> str:
    """``name`` as one directory name: no separators, no leading dot (so no ``..``)."""
    safe = re.sub(r"[^A-Za-z0-9._=,+-]", "_", str(name))
    return "_" + safe if safe.startswith(".") or not safe else safe


# Longest job dir name kept as it is; longer ones keep their start and a digest of the whole.
MAX_DIR_NAME = 240  # a file name holds 255 bytes; .jobs/ adds ".json"
# Keys every job dir names, from the config when the job does not override them: a sweep over
# placements finds its runs again once seeds or depths are added (seed=0 was there all along).
ALWAYS_NAMED = ("model.n_layer", "seed")


def job_dir(overrides: Sequence[str], config: Any = None) -> str:
    """A sweep job's directory name: the job's overrides (command line and sweep params) sorted,
    without those that leave the result alone (``settings.OPERATIONAL``: threads, loggers,
    probes, ...; ``init_probe.*`` stays, being what scripts/init_probe.py's jobs run), plus
    ``ALWAYS_NAMED``'s keys from ``config`` where not overridden, e.g.
    ``model.n_layer=6,placement=post,seed=0``. Named by what the job runs rather than by its
    place in the sweep, a rerun that adds a seed or a depth (or changes threads or loggers)
    finds the runs it finished before."""
    kept: dict[str, str] = {}
    for item in map(str, overrides):
        key = item.lstrip("+~").partition("=")[0]
        left_out = is_operational(key) and not key.startswith("init_probe")
        if not (key.startswith(("hydra.", "hydra/")) or left_out):
            kept[item] = key
    for key in ALWAYS_NAMED:
        value = OmegaConf.select(config, key) if config is not None else None
        if value is not None and key not in kept.values():
            kept[f"{key}={value}"] = key
    text = ",".join(sorted(kept))
    safe = path_safe(text)
    if len(safe) <= MAX_DIR_NAME:
        return safe
    digest = hashlib.sha1(text.encode()).hexdigest()[:10]
    return f"{safe[: MAX_DIR_NAME - 11]}-{digest}"


def grid(params: Any, overrides: Sequence[str]) -> list[list[str]]:
    """Each job's overrides, in launch order, as Hydra's basic sweeper expands a sweep: the
    sweeper's ``params`` first, then the command line's ``overrides``, which replace a param of
    the same key; the cartesian product of every swept value. Hydra's public parser only."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    given = {}
    for args in ([f"{k}={v}" for k, v in (params or {}).items()], list(overrides)):
        for override in parser.parse_overrides(args):
            given[override.get_key_element()] = override
    axes = [
        [f"{key}={v}" for v in o.sweep_string_iterator()]
        if o.is_sweep_override()
        else [f"{key}={o.get_value_element_as_str()}"]
        for key, o in given.items()
    ]
    return [list(job) for job in itertools.product(*axes)]
