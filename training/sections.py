"""The run's sections that are no component's own config, typed and checked, torch-free:
``trainer`` (TrainerConfig), ``divergence``, ``checkpoint`` and ``init_probe``. Each checks its
ranges in ``__post_init__``; training/run_config.py reads them off the composed config with
runs/checks.py's ``node_to`` (unknown keys and wrong types refused first).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from omegaconf import OmegaConf

from runs.checks import node_to, type_ok
from runs.errors import ConfigError

# Lightning precisions normlab runs (its probes and kernels are fp32 / bf16 / fp16 code).
PRECISIONS = ("32-true", "32", "bf16-mixed", "bf16-true", "16-mixed", "16-true")
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps")


def gpu_accelerator(accelerator: str) -> bool:
    """Whether Lightning's ``accelerator`` puts the run on a GPU (auto: when torch sees one)."""
    if accelerator in ("gpu", "cuda"):
        return True
    import torch

    return accelerator == "auto" and torch.cuda.is_available()


@dataclass(frozen=True)
class TrainerConfig:
    """``trainer.*``: the lightning.Trainer arguments normlab reads or checks, at Lightning's own
    defaults; any other Trainer argument passes through in ``others`` for Lightning to check."""

    max_steps: int
    accelerator: str = "auto"
    strategy: str = "auto"
    devices: int | str = "auto"
    num_nodes: int = 1
    precision: str | int = "32-true"
    # float | None: a fraction or null is refused below, with the fix (the data never ends an
    # epoch, so validation is due every N optimizer steps)
    val_check_interval: float | None = 100
    check_val_every_n_epoch: int | None = 1
    log_every_n_steps: int | None = None
    accumulate_grad_batches: int = 1
    gradient_clip_val: float | None = None
    num_sanity_val_steps: int | None = None
    deterministic: bool | str | None = None
    benchmark: bool | None = None
    detect_anomaly: bool = False
    enable_checkpointing: bool = True
    enable_progress_bar: bool = True
    enable_model_summary: bool | None = None
    others: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError(f"trainer.max_steps must be a positive integer, got {self.max_steps}")
        every = self.val_check_interval
        if not type_ok(every, int) or every < 1:
            raise ValueError(
                f"trainer.val_check_interval={every!r} must be a whole number of steps >= 1 "
                "(the data never ends an epoch); e.g. trainer.val_check_interval=100, or "
                "+trainer.limit_val_batches=0 for no validation"
            )
        for key in ("accumulate_grad_batches", "log_every_n_steps"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ValueError(f"trainer.{key}={value!r} must be >= 1")
        devices = self.devices
        if not (devices == "auto" or (type_ok(devices, int) and (devices >= 1 or devices == -1))):
            raise ValueError(
                f"trainer.devices={devices!r} must be >= 1, -1 (every GPU) or auto; e.g. "
                "trainer.devices=1"
            )
        if self.accelerator not in ACCELERATORS:
            raise ValueError(
                f"trainer.accelerator={self.accelerator} is not one normlab runs on; use one of: "
                + ", ".join(ACCELERATORS)
            )
        clip = self.gradient_clip_val
        if clip is not None and not (math.isfinite(clip) and clip >= 0):
            raise ValueError(
                f"trainer.gradient_clip_val={clip!r} must be a finite number >= 0, or null (off)"
            )
        if str(self.precision) not in PRECISIONS:
            raise ValueError(
                f"trainer.precision={self.precision} is not one normlab runs; use one of: "
                + ", ".join(PRECISIONS)
            )

    def check_device(self) -> None:
        """What this machine must have for the run: a GPU where one is asked for."""
        if self.accelerator in ("gpu", "cuda") and not gpu_accelerator("auto"):
            raise ValueError(
                "trainer=gpu needs a CUDA GPU and torch sees none here; use trainer=cpu (or "
                "trainer.accelerator=cpu)"
            )
        if str(self.precision).startswith("16") and not self.on_gpu:
            raise ValueError(
                f"trainer.precision={self.precision} needs a GPU (on the CPU Lightning trains "
                "bf16 instead); use trainer.precision=bf16-mixed"
            )

    @property
    def on_gpu(self) -> bool:
        """Whether the run trains on a GPU (accelerator auto: when torch sees one)."""
        return gpu_accelerator(self.accelerator)

    def kwargs(self) -> dict[str, Any]:
        """The lightning.Trainer arguments."""
        named = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {**{k: v for k, v in named.items() if k != "others"}, **self.others}


def read_trainer(node: Any) -> TrainerConfig:
    """``trainer.*`` as its TrainerConfig, checked against this machine too: the keys it names
    checked, the others passed on; a bad value raises ConfigError (one line)."""
    named = {f.name for f in dataclasses.fields(TrainerConfig)} - {"others"}
    values = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    others = {k: v for k, v in values.items() if k not in named}
    values = {k: v for k, v in values.items() if k in named}
    try:
        trainer = node_to(TrainerConfig, {**values, "others": others}, "trainer")
        trainer.check_device()
    except ValueError as err:
        raise ConfigError(str(err)) from err
    return trainer


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

    def __post_init__(self) -> None:
        if self.every_n_steps is not None and self.every_n_steps < 1:
            raise ValueError(
                f"checkpoint.every_n_steps must be >= 1 or null, got {self.every_n_steps!r}"
            )
        if self.every_s is not None and self.every_s <= 0:
            raise ValueError(f"checkpoint.every_s must be > 0 or null, got {self.every_s!r}")


@dataclass(frozen=True)
class InitProbeConfig:
    """``init_probe.*``: what scripts/init_probe.py measures at init (training/init_probe.py)."""

    placements: list[str] = field(default_factory=lambda: ["post", "pre", "deepnorm"])
    depths: list[int] = field(default_factory=lambda: [2, 6, 12, 24, 48])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    batches: int = 1  # K train batches of the configured data per seed
    batch_size: int = 8

    def __post_init__(self) -> None:
        if self.batches < 1 or self.batch_size < 1:
            raise ValueError("init_probe.batches and init_probe.batch_size must be >= 1")
