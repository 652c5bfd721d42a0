"""Image classification data held in memory as one tensor, with step-indexed train batches.

Sources (``ImageDataConfig.source``):
  digits    scikit-learn's bundled 8x8 digits (1,797 images, 10 classes), no network; a fixed split
            that does not depend on the run seed.
  hf_image  a Hugging Face hub dataset id with an image column and an integer label column.

Pixels are scaled to [0, 1], then normalized per channel with the train split's mean and std.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from data.hub import load_hub_dataset
from data.steps import StepBatches, StepDataModule, step_generator

SOURCES = ("digits", "hf_image")
SPLIT_SEED = 0  # the digits train/val split is a property of the data, not of the run


@dataclass
class ImageDataConfig:
    source: str = "digits"
    hf_id: str | None = None
    hf_config: str | None = None
    image_column: str = "image"
    label_column: str = "label"
    train_split: str = "train"
    val_split: str | None = "test"  # None: carve val_fraction off the train split
    val_fraction: float = 0.2
    image_size: int | None = None  # resize to image_size x image_size when set


def fixed_split(n: int, val_fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(train_idx, val_idx): a permutation seeded by SPLIT_SEED, the first val_fraction is val."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"data.val_fraction={val_fraction} must lie in (0, 1)")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(SPLIT_SEED))
    n_val = round(n * val_fraction)
    return perm[n_val:], perm[:n_val]


def load_digits() -> tuple[torch.Tensor, torch.Tensor, int]:
    """(images (N, 1, 8, 8) in [0, 1], labels (N,), num_classes)."""
    from sklearn.datasets import load_digits as sk_digits

    x, y = sk_digits(return_X_y=True)
    images = torch.as_tensor(x, dtype=torch.float32).view(-1, 1, 8, 8) / 16.0  # values are 0..16
    return images, torch.as_tensor(y, dtype=torch.long), 10


def _hub_split(cfg: ImageDataConfig, split: str) -> tuple[torch.Tensor, torch.Tensor, object]:
    """(images (N, C, H, W) in [0, 1], labels (N,), label feature) of one hub split."""
    import numpy as np

    fallback = "use data=digits"
    ds = load_hub_dataset(cfg.hf_id, cfg.hf_config, split, fallback)
    missing = [c for c in (cfg.image_column, cfg.label_column) if c not in ds.column_names]
    if missing:
        raise ValueError(
            f"{cfg.hf_id} has no column {missing[0]!r}; set data.image_column / "
            f"data.label_column from {ds.column_names}"
        )
    pics = ds[cfg.image_column]
    mode = "L" if getattr(pics[0], "mode", "L") in ("L", "1") else "RGB"
    arrays = []
    for pic in pics:
        pic = pic.convert(mode)
        if cfg.image_size is not None:
            pic = pic.resize((cfg.image_size, cfg.image_size))
        arrays.append(np.asarray(pic))
    if len({a.shape for a in arrays}) > 1 or arrays[0].shape[0] != arrays[0].shape[1]:
        raise ValueError(f"{cfg.hf_id} images are not all square and equal; set data.image_size")
    images = torch.as_tensor(np.stack(arrays)).float() / 255.0
    images = images[:, None] if mode == "L" else images.permute(0, 3, 1, 2)  # (N, C, H, W)
    labels = torch.as_tensor(ds[cfg.label_column], dtype=torch.long)
    return images, labels, ds.features[cfg.label_column]


class ImageDataModule(StepDataModule):
    """Train batches drawn per step from an in-memory image tensor; val in fixed order."""

    def __init__(self, cfg: ImageDataConfig, batch_size: int, seed: int):
        super().__init__()
        if cfg.source not in SOURCES:
            raise ValueError(f"unknown data.source {cfg.source!r}; choose one of {list(SOURCES)}")
        if batch_size < 1:
            raise ValueError(f"data.batch_size={batch_size} must be >= 1")
        self.cfg, self.batch_size, self.seed = cfg, batch_size, seed
        self.start_step = 0
        self.train_images: torch.Tensor | None = None
        self._perm: tuple[int, torch.Tensor] = (-1, torch.empty(0, dtype=torch.long))

    def setup(self, stage: str | None = None) -> None:
        if self.train_images is not None:
            return
        if self.cfg.source == "digits":
            images, labels, num_classes = load_digits()
            if self.cfg.image_size is not None and self.cfg.image_size != 8:
                size = (self.cfg.image_size,) * 2
                images = F.interpolate(images, size=size, mode="bilinear", antialias=True)
            train_idx, val_idx = fixed_split(len(images), self.cfg.val_fraction)
            train_x, train_y, val_x, val_y = (
                images[train_idx],
                labels[train_idx],
                images[val_idx],
                labels[val_idx],
            )
        else:
            if not self.cfg.hf_id:
                raise ValueError("data.source=hf_image needs data.hf_id=<hub dataset id>")
            train_x, train_y, feature = _hub_split(self.cfg, self.cfg.train_split)
            if self.cfg.val_split is None:
                train_idx, val_idx = fixed_split(len(train_x), self.cfg.val_fraction)
                train_x, train_y, val_x, val_y = (
                    train_x[train_idx],
                    train_y[train_idx],
                    train_x[val_idx],
                    train_y[val_idx],
                )
            else:
                val_x, val_y, _ = _hub_split(self.cfg, self.cfg.val_split)
            # A ClassLabel feature knows its class count even if a split misses some classes.
            num_classes = getattr(feature, "num_classes", None) or int(train_y.max()) + 1
        mean = train_x.mean(dim=(0, 2, 3), keepdim=True)
        std = train_x.std(dim=(0, 2, 3), keepdim=True).clamp_min(1e-6)
        self.train_images, self.train_labels = (train_x - mean) / std, train_y
        self.val_images, self.val_labels = (val_x - mean) / std, val_y
        self.mean, self.std = mean.flatten(), std.flatten()
        self.num_classes = num_classes
        self.in_chans, self.image_size = train_x.shape[1], train_x.shape[-1]

    def _ready(self) -> None:
        if self.train_images is None:
            raise RuntimeError("call dm.setup() before using the loaders")

    def train_batch(
        self, step: int, batch_size: int | None = None, rows: slice | None = None
    ) -> tuple[torch.Tensor, ...]:
        """The train batch of step ``step``, a pure function of (seed, step).

        Steps walk through epochs without replacement: epoch e is a permutation drawn from
        (seed, e), and step s takes its (s mod steps_per_epoch)-th slice (the remainder is dropped).
        """
        self._ready()
        b, n = batch_size or self.batch_size, len(self.train_images)
        if b > n:
            raise ValueError(f"batch of {b} exceeds the {n} train images; lower data.batch_size")
        epoch, i = divmod(step, n // b)
        if self._perm[0] != epoch:
            self._perm = (epoch, torch.randperm(n, generator=step_generator(self.seed, epoch)))
        idx = self._perm[1][i * b : (i + 1) * b][rows or slice(None)]
        return self.train_images[idx], self.train_labels[idx]

    def train_dataloader(self) -> DataLoader:
        self._ready()
        return DataLoader(
            StepBatches(self.train_batch, self.batch_size, self.start_step), batch_size=None
        )

    def val_dataloader(self) -> DataLoader:
        """The whole val split, in its fixed order."""
        self._ready()
        batches = list(
            zip(
                self.val_images.split(self.batch_size),
                self.val_labels.split(self.batch_size),
                strict=True,
            )
        )
        return DataLoader(batches, batch_size=None)
