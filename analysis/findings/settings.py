"""``reproduce.*``: an experiment's settings for scripts/reproduce.py and its claims, typed and
checked by their readers (experiments/ plans the launches from it, the claims read it after the
runs), torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runs.checks import node_to
from runs.errors import ConfigError


@dataclass(frozen=True)
class ConfirmConfig:
    """``reproduce.confirm``: fresh seeds at each variant's best lr (select, then confirm)."""

    seeds: list[int]
    by: dict[str, str]  # report param -> the override that fixes it


@dataclass(frozen=True)
class ReproduceConfig:
    confirm: ConfirmConfig | None = None
    widen: list[list[str]] = field(default_factory=list)  # launches: more rates at an edge
    arms: list[list[str]] = field(default_factory=list)  # launches: variants off the grid
    ladder: list[list[str]] = field(default_factory=list)  # --ladder: one size a rung
    ref_lr: float | None = None  # F2's rate
    at_batch: dict[str, dict[str, int]] = field(default_factory=dict)  # F7: steps per batch
    batch: str | None = None  # F7: the batch size as at_batch's key
    # the experiment's own run settings, filled by read_reproduce (set elsewhere: RUN_KEYS)
    max_steps: int | None = None
    lr: float | None = None
    warmup_steps: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.confirm, dict):
            object.__setattr__(
                self, "confirm", node_to(ConfirmConfig, self.confirm, "reproduce.confirm")
            )


# The fields read off the experiment's run config, with where a user sets each.
RUN_KEYS = {
    "max_steps": "trainer.max_steps={value}",
    "lr": "optim.lr={value}",
    "warmup_steps": "optim.warmup_steps={value}",
}


def read_reproduce(cfg: Any) -> ReproduceConfig:
    """The composed config's ``reproduce`` node, with the run settings the claims read."""
    node = cfg.get("reproduce") or {}
    node = node_to(dict, node, "reproduce", fields_of=ReproduceConfig, owned=RUN_KEYS)
    run = {"max_steps": cfg.trainer.max_steps, "lr": cfg.optim.lr}
    try:
        return ReproduceConfig(**node, **run, warmup_steps=cfg.optim.warmup_steps)
    except TypeError as err:  # reproduce.confirm without its seeds or by
        raise ConfigError(f"reproduce: {err}") from err
