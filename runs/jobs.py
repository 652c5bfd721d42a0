"""A sweep's jobs and the names of their run dirs: the grid Hydra's basic sweeper expands, and
each job's directory name (what it runs, not its place in the sweep, without what every job of
the sweep shares). The harness names its jobs' dirs with these; reproduce finds them again with
the same ones. Torch-free."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from runs import runfiles
from runs.errors import ConfigError
from runs.runfiles import write_atomic
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
# <sweep dir>/CONSTANTS: the overrides every job of the sweep dir's first launch gave alike
# (key -> override), which its job dir names leave out.
CONSTANTS = ".constants.json"
UNSET = "<unset>"  # a constant's key that a later launch's job does not override


def named(item: str) -> str | None:
    """The key of an override a job dir name shows; None for those that leave the result alone
    (``settings.OPERATIONAL``: threads, loggers, probes, ...; ``init_probe.*`` stays, being
    what scripts/init_probe.py's jobs run) and for Hydra's own settings."""
    key = item.lstrip("+~").partition("=")[0]
    left_out = is_operational(key) and not key.startswith("init_probe")
    return None if key.startswith(("hydra.", "hydra/")) or left_out else key


def job_dir(
    overrides: Sequence[str], config: Any = None, constants: Mapping[str, str] | None = None
) -> str:
    """A sweep job's directory name: the job's overrides (command line and sweep params) that
    ``named`` keeps, sorted, plus ``ALWAYS_NAMED``'s keys from ``config`` where not overridden,
    e.g. ``model.n_layer=6,placement=post,seed=0``; the sweep's ``constants`` left out (a
    constant's key the job does not override is named ``key=<unset>``). Named by what the job
    runs rather than by its place in the sweep, a rerun that adds a seed or a depth (or changes
    threads or loggers) finds the runs it finished before."""
    constants = constants or {}
    kept: dict[str, str] = {}
    given = set()
    for item in map(str, overrides):
        key = named(item)
        given.add(key)
        if key is not None and constants.get(key) != item:
            kept[item] = key
    for key in constants.keys() - given:
        kept[f"{key}={UNSET}"] = key
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


def constant_overrides(jobs: Sequence[Sequence[str]]) -> dict[str, str]:
    """The overrides every job gives alike and a job dir would name (``ALWAYS_NAMED``'s keys
    aside, which every name shows), as key -> override."""
    if not jobs:
        return {}
    common = set(map(str, jobs[0])).intersection(*(map(str, job) for job in jobs[1:]))
    keys = {item: named(item) for item in common}
    return {k: item for item, k in sorted(keys.items()) if k and k not in ALWAYS_NAMED}


def sweep_constants(sweep_dir: Path, first: Sequence[Sequence[str]], record: bool = False) -> dict:
    """The constants a sweep dir's job names leave out: those it recorded; for a dir whose
    record is gone, those its job dirs' own records give (``rebuilt_constants``); for a dir
    without any run yet, those of ``first`` (the jobs of its first launch), written to the dir
    when ``record``; for a dir that holds runs of a launch before these records, none (their
    names stay whole, so they are found again)."""
    path = Path(sweep_dir) / CONSTANTS
    if path.is_file():
        return read_constants(path)
    where = Path(sweep_dir)
    jobs = [p for p in where.iterdir() if p.is_dir() and not p.name.startswith(".")] if (
        where.is_dir()) else []  # fmt: skip
    constants = rebuilt_constants(jobs) if jobs else constant_overrides(first)
    if record:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(constants, indent=1))
    return constants


def read_constants(path: Path) -> dict:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        found = err
    if not isinstance(found, dict):
        raise ConfigError(
            f"{path} cannot be read ({found if isinstance(found, Exception) else 'not a mapping'});"
            " delete it: the sweep rebuilds it from its job dirs' own records"
        )
    return found


def rebuilt_constants(jobs: Sequence[Path]) -> dict:
    """The constants a sweep's job dirs were named without, from their own records
    (``.hydra/overrides.yaml``): the overrides every job gave alike that no dir name shows,
    kept only when they name every dir as it is named (else none: whole names, an older
    layout)."""
    launched = {}
    for job in jobs:
        try:
            overrides = OmegaConf.to_container(OmegaConf.load(job / runfiles.OVERRIDES))
        except Exception:  # noqa: BLE001 - no readable record: not a job of this layout
            continue
        if isinstance(overrides, list):
            launched[job.name] = [str(o) for o in overrides]
    if not launched:
        return {}
    candidates = constant_overrides(list(launched.values()))
    constants = {k: item for k, item in candidates.items()
                 if not any(path_safe(item) in name.split(",") for name in launched)}  # fmt: skip
    names = {job_dir(o, None, constants) for o in launched.values()}
    return constants if constants and names == set(launched) else {}


def recorded_constants(sweep_dir: Any) -> dict:
    """The constants a sweep dir recorded (none where it recorded none)."""
    path = Path(str(sweep_dir)) / CONSTANTS if sweep_dir else None
    return read_constants(path) if path is not None and path.is_file() else {}


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
