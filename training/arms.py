"""A sweep's arms: the keys that act under some options of a config group, or some connections,
only. In a sweep across a group's options (``param=sp,mup param.base_width=32``) or across
connections (``model.connection=residual,hc model.streams=4``), such a key is that arm's: the
launch says so once (train.py's preflight, training/launch.py) and each job of the other arms
runs, and records, without it (``drop_inapplicable``). Outside such a sweep a key the chosen
option lacks is refused in one line (``check_option_key``). Torch-free.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

CONF = Path(__file__).resolve().parents[1] / "conf"


def group_options(group: str, conf: Path = CONF) -> list[str]:
    return sorted(p.stem for p in (conf / group).glob("*.yaml"))


def overrides_of(args: Sequence[str]) -> list[str]:
    """The command line's overrides: Hydra's flags and their values left out."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg.startswith("-"):
            skip = arg in VALUE_FLAGS
        else:
            out.append(arg)
    return out


# Hydra's flags that take the next argument as their value (-sc install=bash is no override).
VALUE_FLAGS = {
    "-sc", "--shell-completion", "-c", "--cfg", "-p", "--package", "-cp", "--config-path",
    "-cn", "--config-name", "-cd", "--config-dir", "--info", "--experimental-rerun",
}  # fmt: skip


# Groups whose options are flat settings (logger composes its options from others).
CHECKED_GROUPS = ("model", "data", "optim", "placement", "norm", "param", "trainer")


def option_keys(group: str, option: str, conf: Path = CONF) -> set[str]:
    """The settings one option file ``conf/<group>/<option>.yaml`` defines (an option packaged
    at the root keeps its group's settings under ``<group>:``)."""
    import yaml

    text = (conf / group / f"{option}.yaml").read_text()
    node = yaml.safe_load(text) or {}
    if text.startswith("# @package _global_"):
        node = node.get(group) or {}
    return {k for k in node if k != "defaults"}


def group_keys(group: str, conf: Path = CONF) -> set[str]:
    """The settings any option of ``conf/<group>/`` defines."""
    return {k for option in group_options(group, conf) for k in option_keys(group, option, conf)}


# Groups whose options each define their own settings (no option inherits another's), so a key
# one option lacks is an error there: placement.alpha with placement=pre.
OPTION_GROUPS = ("model", "placement", "norm", "param", "optim")


def chosen_options(group: str, args: Sequence[str], conf: Path = CONF) -> list[str]:
    """The options of ``group`` this command line runs: its ``group=a[,b]``, else the default
    in config.yaml; none when an experiment may choose it instead."""
    given = [a.split("=", 1)[1] for a in overrides_of(args) if a.split("=", 1)[0] == group]
    if given:
        return [o for o in given[-1].split(",") if o in group_options(group, conf)]
    if any(a.split("=", 1)[0] == "experiment" for a in overrides_of(args)):
        return []
    match = re.search(rf"^\s*-\s*{group}:\s*(\w+)", (conf / "config.yaml").read_text(), re.M)
    return [match.group(1)] if match else []


def check_option_key(group: str, sub: str, arg: str, args: Sequence[str], conf: Path) -> str:
    """A key some option of ``group`` has but the chosen one lacks, as one line naming those
    that have it (Hydra answers with a page about struct mode). In a sweep across the group's
    options, a key that some of the chosen options define is that arm's: the note to print once
    is returned (the jobs of the other options run without it: ``inapplicable``)."""
    if group not in OPTION_GROUPS:
        return ""
    chosen = chosen_options(group, args, conf)
    lacking = [o for o in chosen if sub not in option_keys(group, o, conf)]
    if not lacking:
        return ""
    if arms := [o for o in chosen if o not in lacking]:
        return (
            f"note: {group}.{sub} applies to {group}={','.join(arms)}; the jobs with "
            f"{group}={','.join(lacking)} run without it"
        )
    having = [o for o in group_options(group, conf) if sub in option_keys(group, o, conf)]
    raise SystemExit(
        f"error: {group}={lacking[0]} has no setting '{sub}' (in '{arg}'); {group} options "
        f"with {sub}: {', '.join(having)} (choose one, or drop {group}.{sub})"
    )


# Model keys that act under some connections only (models/catalog.py's CONNECTIONS): in a sweep
# across model.connection, the jobs of the others run them at their model option's default.
CONNECTION_KEYS = ("streams", "fracs", "sinkhorn_iters", "stream_noise")


def connection_uses(sub: str, connection: str) -> bool:
    from models.catalog import get_connection

    spec = get_connection(connection)
    return (spec.manifold and not spec.lite) if sub == "sinkhorn_iters" else spec.hyper


def check_connection_key(sub: str, args: Sequence[str]) -> str:
    """The note for ``model.<sub>`` in a sweep across connections only some of which use it."""
    given = [a.split("=", 1)[1] for a in overrides_of(args) if a.startswith("model.connection=")]
    try:
        values = given[-1].split(",") if given else []
        users = [v for v in values if connection_uses(sub, v)]
    except ValueError:  # an unknown connection: the model's own check names the choices
        return ""
    if given and not users:  # no connection of the command line uses it
        from models.catalog import CONNECTIONS

        users = "/".join(c for c in CONNECTIONS if connection_uses(sub, c))
        raise SystemExit(
            f"error: model.{sub} acts under model.connection={users} only, and this command "
            f"line runs model.connection={given[-1]}; drop model.{sub} or set "
            f"model.connection={users.split('/')[0]}"
        )
    if not users or len(users) == len(values):
        return ""
    others = [v for v in values if v not in users]
    return (
        f"note: model.{sub} applies to model.connection={','.join(users)}; the jobs with "
        f"model.connection={','.join(others)} run it at its default"
    )


def inapplicable(
    overrides: Sequence[str], choices: Any, connection: str | None = None, conf: Path = CONF
) -> list[str]:
    """The keys among a job's ``overrides`` that do not act in it: a key its chosen group
    option (``choices``: group -> option) does not define, or a connection's key under a
    ``connection`` (set on the command line) that does not use it: an arm's key in a sweep
    across a group's options or across connections (``check_option_key``), which the job runs,
    and records, without."""
    out = []
    swept = any(o.startswith("model.connection=") for o in overrides)  # by the command line
    for item in overrides:
        key = item.lstrip("+~").partition("=")[0]
        group, _, sub = key.partition(".")
        option = choices.get(group) if group in OPTION_GROUPS and sub else None
        if option and "." not in sub and sub not in option_keys(group, str(option), conf):
            out.append(key)
        elif group == "model" and sub in CONNECTION_KEYS and connection and swept:
            out += [] if connection_uses(sub, connection) else [key]
    return out


DROPPED: list[str] = []  # the keys the job this process runs took out (drop_inapplicable)


def drop_inapplicable(cfg: Any, conf: Path = CONF) -> list[str]:
    """This sweep job's ``drop``, with its own overrides and group choices (a single run's keys
    were checked whole: by the preflight and the model's checks). The keys taken out."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return []
    hydra_cfg = HydraConfig.get()
    DROPPED[:] = drop(cfg, hydra_cfg.overrides.task, hydra_cfg.runtime.choices, conf)
    return list(DROPPED)  # what this job's DDP processes leave off the line they replay


def drop(cfg: Any, overrides: Sequence[str], choices: Any, conf: Path = CONF) -> list[str]:
    """Take out of a job's config (in place) the keys that do not act in it (``inapplicable``):
    a group key goes, a connection's key returns to its model option's default. The keys taken
    out (a job does this, and so does the sweep's check of its grid)."""
    import yaml
    from omegaconf import open_dict

    keys = inapplicable(overrides, choices, OmegaConf.select(cfg, "model.connection"), conf)
    with open_dict(cfg):
        for key in keys:
            group, sub = key.split(".", 1)
            if group == "model":  # every model option defines it: back to its default
                option = yaml.safe_load((conf / "model" / f"{choices['model']}.yaml").read_text())
                cfg.model[sub] = option[sub]
            else:
                cfg[group].pop(sub, None)
    return keys
