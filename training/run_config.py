"""The run's config as one typed tree, checked once at the start of an attempt.

``typed_config(cfg)`` reads every group of the composed config into its dataclass (the schema is
those dataclasses: training/config.py's ``node_to`` refuses unknown keys and values of the wrong
type in one line, the dataclasses check ranges), before any data is prepared or model built. The
build and the loggers read this tree only; the composed config itself travels in it for what
takes it whole (the wandb run records it, ``callbacks.*`` are instantiated from it). The run
dir (training/attempt.py) keeps the composed config as its record, also of a job whose config
fails here. A single run's tree is made once, by ``check_config`` before torch loads (train.py);
a sweep checks its grid once and each job makes its own as its attempt begins.

Torch-free, as is every dataclass it reads into (models/config.py, data/config.py,
training/optim_config.py, training/probe_config.py, the sections below): ``check_config`` runs
all of it before torch is imported (train.py, the sweep's grid check), so a bad key or value
answers as fast as a typo. ``record_defaults``: what an older run record lacks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from data.config import ImageDataConfig, TextDataConfig
from models.config import GPTConfig, NormConfig, PlacementConfig, ViTConfig
from runs.errors import ConfigError
from training.config import (
    check_run_length,
    check_top_level,
    compile_mode,
    gpu_accelerator,
    node_to,
    optim_config,
)
from training.errors import BUILD_ERRORS
from training.optim_config import OptimConfig
from training.probe_config import ProbeConfig
from training.specs import MODELS, ModelSpec

# Model config fields set by a group of their own, with where a user sets each.
OWNED = {"placement": "placement={value}", "norm": "norm={value}"}
# The model fields placement and norm options were before they had groups of their own: set
# under model, each is refused with where it belongs.
MISPLACED = {
    "deepnorm_alpha": "placement.alpha={value}",
    "deepnorm_beta": "placement.beta={value}",
    "mix_fraction": "placement.mix_fraction={value}",
    "norm_eps": "norm.eps={value}",
    "dyt_alpha": "norm.alpha={value}",
    "norm_groups": "norm.groups={value}",
}


# The loggers built by name (training/loggers.py); any other entry of ``logger`` names its class.
LOGGERS = ("csv", "wandb")


def logger_config(cfg: DictConfig) -> dict[str, dict[str, Any]]:
    """``logger.*`` as {name: its arguments}; an entry that is neither a known logger nor a
    ``_target_`` is refused in one line."""
    node = OmegaConf.to_container(cfg.get("logger") or {}, resolve=True)
    for key, args in node.items():
        if key not in LOGGERS and not (isinstance(args, dict) and "_target_" in args):
            raise ConfigError(
                f"unknown logger '{key}'; choose from: {', '.join(LOGGERS)}, or give "
                f"logger.{key}._target_=<a Lightning logger class>"
            )
    return node


# Where a diverged run's last checkpoint goes, so none that looks final survives.
CHECKPOINT_POLICIES = ("rename", "delete", "keep")


@dataclass
class DivergenceConfig:
    loss_factor: float | None = 3.0  # diverged when loss > factor * reference; None: off
    ref_steps: int = 1  # reference = mean of the first ref_steps finite training losses
    checkpoint: str = "rename"  # what happens to a diverged run's checkpoints: rename|delete|keep

    def __post_init__(self) -> None:
        if self.loss_factor is not None and self.loss_factor <= 1.0:
            raise ValueError(f"divergence.loss_factor must be > 1 or null, got {self.loss_factor}")
        if self.ref_steps < 1:
            raise ValueError(f"divergence.ref_steps must be >= 1, got {self.ref_steps}")
        if self.checkpoint not in CHECKPOINT_POLICIES:
            raise ValueError(
                f"unknown divergence.checkpoint '{self.checkpoint}'; "
                f"choose one of: {', '.join(CHECKPOINT_POLICIES)}"
            )


@dataclass(frozen=True)
class CheckpointConfig:
    every_n_steps: int | None = None  # None: a tenth of the run
    every_s: float | None = None  # also after this many seconds; None: steps only


@dataclass(frozen=True)
class InitProbeConfig:
    """``init_probe.*``: what scripts/init_probe.py measures at init (training/init_probe.py)."""

    placements: list[str] = field(default_factory=lambda: ["post", "pre", "deepnorm"])
    depths: list[int] = field(default_factory=lambda: [2, 6, 12, 24, 48])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    batches: int = 1  # K train batches of the configured data per seed
    batch_size: int = 8


@dataclass(frozen=True)
class ConfirmConfig:
    """``reproduce.confirm``: fresh seeds at each variant's best lr (select, then confirm)."""

    seeds: list[int]
    by: dict[str, str]  # report param -> the override that fixes it


@dataclass(frozen=True)
class ReproduceConfig:
    """``reproduce.*``: an experiment's settings for scripts/reproduce.py and its claims, read
    after the runs (analysis/findings)."""

    confirm: ConfirmConfig | None = None
    widen: list[list[str]] = field(default_factory=list)  # launches: more rates at an edge
    arms: list[list[str]] = field(default_factory=list)  # launches: variants off the grid
    baseline: dict[str, Any] = field(default_factory=dict)  # a key an arm varies, elsewhere
    update_arm: dict[str, Any] = field(default_factory=dict)  # where F3c/V3 read the update
    ref_lr: float | None = None  # F2's rate
    at_batch: dict[str, dict[str, int]] = field(default_factory=dict)  # F7: steps per batch
    batch: str | None = None  # F7: the batch size as at_batch's key

    def __post_init__(self) -> None:
        if isinstance(self.confirm, dict):
            object.__setattr__(
                self, "confirm", node_to(ConfirmConfig, self.confirm, "reproduce.confirm")
            )


@dataclass(frozen=True)
class RunConfig:
    """Everything the build reads, typed and checked."""

    name: str
    seed: int
    kind: str  # model.name
    spec: ModelSpec  # its spec
    data: Any  # the kind's data config (TextDataConfig, ImageDataConfig)
    batch_size: int
    model: dict[str, Any]  # the model node's fields; the prepared data decides the rest
    init_from: str | None  # a GPT-2 checkpoint to start from
    placement: PlacementConfig
    norm: NormConfig
    optim: OptimConfig  # its warmup as the run uses it (clamped to the run, see config.py)
    probes: ProbeConfig
    divergence: DivergenceConfig
    checkpoint: CheckpointConfig
    max_steps: int
    trainer: dict[str, Any]  # Lightning's Trainer arguments, as configured
    compile: str | None  # the torch.compile mode; None: eager
    logger: dict[str, dict[str, Any]]  # each logger's arguments (training/loggers.py)
    group: str | None  # the wandb group when set by hand; None: the sweep's
    composed: DictConfig  # the config as composed: the wandb run's record, user callbacks

    @property
    def accelerator(self) -> str:
        return str(self.trainer.get("accelerator", "auto"))

    @property
    def on_gpu(self) -> bool:
        """Whether the run trains on a GPU (accelerator auto: when torch sees one)."""
        return gpu_accelerator(self.accelerator)


def model_spec(cfg: DictConfig) -> ModelSpec:
    """The spec of ``model.name``, whose data kind the data config must hold."""
    name = cfg.model.name
    if name not in MODELS:
        raise ConfigError(f"unknown model.name '{name}'; choose one of: {', '.join(MODELS)}")
    spec = MODELS[name]
    if cfg.data.kind != spec.data_kind:
        raise ConfigError(
            f"model={name} trains on {spec.data_kind} data but the data config holds "
            f"{cfg.data.kind} data; pick a data=... option of kind {spec.data_kind}"
        )
    return spec


def typed_config(cfg: DictConfig) -> RunConfig:
    """The typed tree of ``cfg``; a bad key or value raises ConfigError (one line)."""
    try:
        return read_tree(cfg)
    except ConfigError:
        raise
    except BUILD_ERRORS as err:  # a dataclass's own range check
        raise ConfigError(str(err)) from err


def read_tree(cfg: DictConfig) -> RunConfig:
    """typed_config's reading, group by group (its errors as raised)."""
    logger = logger_config(cfg)
    spec = model_spec(cfg)
    warmup = check_run_length(cfg)  # also checks the checkpoint cadence
    model = node_to(
        dict,
        cfg.model,
        "model",
        drop=("name", "init_from"),
        fields_of=spec.config,
        owned={**OWNED, **MISPLACED},
    )
    # checked here, read by scripts/init_probe.py and scripts/reproduce.py
    node_to(InitProbeConfig, cfg.get("init_probe") or {}, "init_probe")
    node_to(ReproduceConfig, cfg.get("reproduce") or {}, "reproduce")
    placement = node_to(PlacementConfig, cfg.placement, "placement")
    norm = node_to(NormConfig, cfg.norm, "norm")
    trainer = OmegaConf.to_container(cfg.trainer, resolve=True)
    # the model config checked whole now, the fields the data decides at placeholders (the
    # build reads them off the prepared data)
    spec.config(**model, **spec.data_placeholders(model), placement=placement, norm=norm)
    return RunConfig(
        name=str(cfg.name),
        seed=cfg.seed,
        kind=str(cfg.model.name),
        spec=spec,
        data=node_to(spec.data_config, cfg.data, "data", drop=("kind", "batch_size")),
        batch_size=cfg.data.batch_size,
        model=model,
        init_from=cfg.model.get("init_from") or None,
        placement=placement,
        norm=norm,
        optim=optim_config(cfg, warmup),
        probes=node_to(ProbeConfig, cfg.get("probes") or {}, "probes"),
        divergence=node_to(DivergenceConfig, cfg.get("divergence") or {}, "divergence"),
        checkpoint=node_to(CheckpointConfig, cfg.get("checkpoint") or {}, "checkpoint"),
        max_steps=cfg.trainer.max_steps,
        trainer=trainer,
        compile=compile_mode(cfg.compile),
        logger=logger,
        group=cfg.get("group"),
        composed=cfg,
    )


def check_config(cfg: DictConfig, quiet: bool = False) -> RunConfig:
    """Every check of the root keys and of typed_config, before torch is imported (train.py
    hands the typed tree to the run): a bad key or value is refused in one line (ConfigError)
    before any run dir is touched. ``quiet``: the warnings the checks print are left to the
    runs (a sweep's grid check: each job makes them again)."""
    with contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext():
        check_top_level(cfg)
        return typed_config(cfg)


# --- what an older run record lacks ------------------------------------------------------------
@functools.cache
def record_defaults() -> dict[str, Any]:
    """{dotted key: default} of the typed config fields, as JSON values; a field whose default
    differs between the classes under one prefix (GPT and ViT) has none here."""
    found: dict[str, list] = {}
    for prefix, classes in (
        ("optim", (OptimConfig,)),
        ("data", (TextDataConfig, ImageDataConfig)),
        ("model", (GPTConfig, ViTConfig)),
        ("placement", (PlacementConfig,)),
        ("norm", (NormConfig,)),
        ("divergence", (DivergenceConfig,)),
    ):
        for cls in classes:
            for f in dataclasses.fields(cls):
                if f.default is not dataclasses.MISSING:
                    value = f.default
                elif f.default_factory is not dataclasses.MISSING:
                    value = f.default_factory()
                else:
                    continue
                if dataclasses.is_dataclass(value):
                    continue  # a group of its own (placement, norm), under its own prefix
                found.setdefault(f"{prefix}.{f.name}", []).append(json.loads(json.dumps(value)))
    defaults = {k: v[0] for k, v in found.items() if all(x == v[0] for x in v)}
    defaults["kernels.fused"] = True
    # Keys whose default changed when they were added: a record without the key ran the old
    # behaviour, so it compares at that (ReZero had one gate per sub-layer before placement.gates).
    defaults.update(RAN_BEFORE_KEY)
    return defaults


RAN_BEFORE_KEY = {"placement.gates": "sublayer"}
