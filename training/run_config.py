"""The run's config as one typed tree, checked once at the start of an attempt.

``typed_config(cfg)`` reads every group of the composed config into its dataclass (the schema is
those dataclasses: runs/checks.py's ``node_to`` refuses unknown keys and values of the wrong
type in one line, the dataclasses check ranges), before any data is prepared or model built. The
build and the loggers read this tree only; the composed config itself travels in it for what
takes it whole (the wandb run records it, ``callbacks.*`` are instantiated from it). The run
dir (training/attempt.py) keeps the composed config as its record, also of a job whose config
fails here. A single run's tree is made once, by ``check_config`` before torch loads (train.py);
a sweep checks its grid once and each job makes its own as its attempt begins.

Torch-free, as is every dataclass it reads into (models/config.py, data/config.py,
training/optim_config.py, training/probe_config.py, training/sections.py): ``check_config`` runs
all of it before torch is imported (train.py, the sweep's grid check), so a bad key or value
answers as fast as a typo. ``record_defaults``: the value a key a run record lacks compares at
(its field's default; records of older layouts are converted by scripts/migrate.py first).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from data.config import ImageDataConfig, TextDataConfig
from models.config import GPTConfig, NormConfig, ParamConfig, PlacementConfig, ViTConfig
from runs.checks import node_to, type_ok
from runs.errors import ConfigError
from runs.schema import check_top_level
from training.errors import BUILD_ERRORS
from training.optim_config import OptimConfig, read_optim
from training.packing import PackConfig
from training.probe_config import ProbeConfig
from training.sections import (
    CheckpointConfig,
    DivergenceConfig,
    InitProbeConfig,
    TrainerConfig,
    read_trainer,
)
from training.specs import MODELS, ModelSpec

# Model config fields set by a group of their own, with where a user sets each.
OWNED = {"placement": "placement={value}", "norm": "norm={value}", "param": "param={value}"}

# The optimizers muP's and CompleteP's learning-rate rules are derived for (Adam-type: each
# update normalized entrywise; Yang et al. 2022, Table 3).
ADAM_TYPE = ("adamw", "adam_atan2", "adafactor")

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


@dataclass(frozen=True)
class RunConfig:
    """Everything the build reads, typed and checked."""

    name: str
    seed: int
    model_name: str  # model.name: gpt | vit
    spec: ModelSpec  # its spec
    data: TextDataConfig | ImageDataConfig  # the kind's data config
    batch_size: int
    # the model config (GPTConfig, ViTConfig) with its placement and norm; the fields the data
    # decides (spec.data_fields: vocab_size, image_size, ...) hold placeholders its checks
    # accept until training/build.py's model_config fills them from the prepared data
    model: GPTConfig | ViTConfig
    init_from: str | None  # a GPT-2 checkpoint to start from
    optim: OptimConfig  # its warmup as the run uses it (clamped to the run: check_run_length)
    probes: ProbeConfig
    divergence: DivergenceConfig
    checkpoint: CheckpointConfig
    trainer: TrainerConfig
    init_probe: InitProbeConfig  # read by scripts/init_probe.py only
    compile: str | None  # the torch.compile mode; None: eager
    logger: dict[str, dict[str, Any]]  # each logger's arguments (training/loggers.py)
    group: str | None  # the wandb group when set by hand; None: the sweep's
    composed: DictConfig  # the config as composed: the wandb run's record, user callbacks

    @property
    def placement(self) -> PlacementConfig:
        return self.model.placement

    @property
    def norm(self) -> NormConfig:
        return self.model.norm

    @property
    def max_steps(self) -> int:
        return self.trainer.max_steps


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
    trainer = read_trainer(cfg.trainer)
    warmup = check_run_length(cfg, trainer.max_steps)
    model = node_to(
        dict, cfg.model, "model", drop=("name", "init_from"), fields_of=spec.config, owned=OWNED
    )
    placement = node_to(PlacementConfig, cfg.placement, "placement")
    norm = node_to(NormConfig, cfg.norm, "norm")
    param = node_to(ParamConfig, cfg.get("param") or {}, "param")
    node_to(PackConfig, cfg.get("pack") or {}, "pack")  # read by the sweep's jobs (launch.py)
    if "skip_step" in (cfg.optim.get("guards") or []) and trainer.accumulate_grad_batches > 1:
        raise ConfigError(
            "optim.guards skip_step scores the step's loss, and with "
            f"trainer.accumulate_grad_batches={trainer.accumulate_grad_batches} the optimizer sees "
            "only the last micro-batch's: drop skip_step, or set trainer.accumulate_grad_batches=1"
        )
    emb, readout = (cfg.optim.get(k) or 1.0 for k in ("emb_lr_mult", "readout_lr_mult"))
    if emb != readout and model.get("tie_weights"):
        raise ConfigError(
            "optim.emb_lr_mult and optim.readout_lr_mult differ, and the readout is the token "
            "embedding (model.tie_weights=true): set model.tie_weights=false, or one multiplier"
        )
    if param.name != "sp" and cfg.optim.name not in ADAM_TYPE:
        raise ConfigError(
            f"param={param.name} scales Adam-type learning rates; optim={cfg.optim.name} would "
            f"need other rules: use optim={' or optim='.join(ADAM_TYPE)}, or param=sp"
        )
    return RunConfig(
        name=str(cfg.name),
        seed=cfg.seed,
        model_name=str(cfg.model.name),
        spec=spec,
        data=node_to(spec.data_config, cfg.data, "data", drop=("kind", "batch_size")),
        batch_size=cfg.data.batch_size,
        model=spec.config(
            **model,
            **spec.data_placeholders(model),
            placement=placement,
            norm=norm,
            param=param,
        ),
        init_from=cfg.model.get("init_from") or None,
        optim=read_optim(cfg.optim, warmup),
        probes=node_to(ProbeConfig, cfg.get("probes") or {}, "probes"),
        divergence=node_to(DivergenceConfig, cfg.get("divergence") or {}, "divergence"),
        checkpoint=node_to(CheckpointConfig, cfg.get("checkpoint") or {}, "checkpoint"),
        trainer=trainer,
        init_probe=node_to(InitProbeConfig, cfg.get("init_probe") or {}, "init_probe"),
        compile=compile_mode(cfg.compile),
        logger=logger,
        group=cfg.get("group"),
        composed=cfg,
    )


def check_run_length(cfg: DictConfig, steps: int) -> int:
    """The warmup to use: one longer than the run is clamped with a warning, or refused with
    ``optim.strict_warmup=true`` (stability experiments, where warmup is the variable)."""
    warmup = cfg.optim.warmup_steps
    if not type_ok(warmup, int) or warmup < 0:
        raise ConfigError(f"optim.warmup_steps must be an integer >= 0, got {warmup!r}")
    if warmup <= steps:
        return warmup
    if cfg.optim.get("strict_warmup", False):
        raise ConfigError(
            f"optim.warmup_steps={warmup} is longer than the run (trainer.max_steps={steps}); "
            f"lower optim.warmup_steps (e.g. optim.warmup_steps={max(1, steps // 10)}) "
            "or raise trainer.max_steps"
        )
    clamped = max(1, steps // 10)
    print(
        f"warning: optim.warmup_steps={warmup} is longer than the run "
        f"(trainer.max_steps={steps}); warming up over {clamped} steps instead",
        flush=True,
    )
    return clamped


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compile_mode(value: object) -> str | None:
    """The torch.compile mode `compile` asks for: null/false is eager, true is "default"."""
    if value is None or value is False:
        return None
    if value is True:
        return "default"
    if value not in COMPILE_MODES:
        raise ConfigError(
            f"compile={value!r} is not a torch.compile mode; use true, false or one of: "
            + ", ".join(COMPILE_MODES)
        )
    return str(value)


def check_config(cfg: DictConfig, quiet: bool = False) -> RunConfig:
    """Every check of the root keys and of typed_config, before torch is imported (train.py
    hands the typed tree to the run): a bad key or value is refused in one line (ConfigError)
    before any run dir is touched. ``quiet``: the warnings the checks print are left to the
    runs (a sweep's grid check: each job makes them again)."""
    with contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext():
        check_top_level(cfg)
        return typed_config(cfg)


# --- what a run record lacks ---------------------------------------------------------------------
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
        ("param", (ParamConfig,)),
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
    return defaults
