"""Image classification batches: uint8 images (data/images.py) converted per batch, step-indexed.

Per batch, pixels become floats in [0, 1] and are normalized per channel with the train split's
mean and std, ``x = (u / scale - mean) / std`` (scale 16 for digits, 255 otherwise). Train steps
walk through epochs without replacement: epoch e is a permutation drawn from (seed, e), step s
takes its (s mod steps_per_epoch)-th slice. Train batches may then be augmented
(``data.augment``), with draws that are a pure function of (seed, step) as well:

  crop  pad by ``crop_padding`` zeros (the mean pixel, after normalization) and crop back to
        H x W at a random offset in [0, 2 * crop_padding] along each axis
  flip  mirror left-right with probability 1/2

Val is the val split in its fixed order, never augmented. Digits are split by a permutation
seeded by SPLIT_SEED (a property of the data, not of the run), as are sets without a val split.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from data.config import ImageDataConfig
from data.images import SOURCES, load_digits, prepare_images
from data.steps import StepBatches, StepDataModule, step_generator, stream_generator

SPLIT_SEED = 0  # the digits train/val split is a property of the data, not of the run


def fixed_split(n: int, val_fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(train_idx, val_idx): a permutation seeded by SPLIT_SEED, the first val_fraction is val."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"data.val_fraction={val_fraction} must lie in (0, 1)")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(SPLIT_SEED))
    n_val = round(n * val_fraction)
    return perm[n_val:], perm[:n_val]


# ---------------------------------------------------------------- augmentations


def random_crop(x: torch.Tensor, gen: torch.Generator, n: int, rows: slice, pad: int):
    """Rows ``rows`` of a global batch of ``n``: pad, then crop back at drawn offsets."""
    b, _, h, w = x.shape
    dy, dx = torch.randint(0, 2 * pad + 1, (2, n), generator=gen)[:, rows]
    padded = F.pad(x, (pad, pad, pad, pad))
    iy = (dy[:, None] + torch.arange(h))[:, :, None]  # (B, H, 1)
    ix = (dx[:, None] + torch.arange(w))[:, None, :]  # (B, 1, W)
    out = padded[torch.arange(b)[:, None, None], :, iy, ix]  # (B, H, W, C)
    return out.permute(0, 3, 1, 2).contiguous()


def random_flip(x: torch.Tensor, gen: torch.Generator, n: int, rows: slice, pad: int):
    flip = (torch.rand(n, generator=gen) < 0.5)[rows]
    return torch.where(flip[:, None, None, None], x.flip(-1), x)


AugmentFn = Callable[[torch.Tensor, torch.Generator, int, slice, int], torch.Tensor]
AUGMENTS: dict[str, AugmentFn] = {"crop": random_crop, "flip": random_flip}


def check_image_config(cfg: ImageDataConfig, batch_size: int) -> None:
    if cfg.source not in SOURCES:
        raise ValueError(f"unknown data.source {cfg.source!r}; choose one of {list(SOURCES)}")
    if batch_size < 1:
        raise ValueError(f"data.batch_size={batch_size} must be >= 1")
    for name in cfg.augment:
        if name not in AUGMENTS:
            raise ValueError(f"unknown data.augment {name!r}; choose from {list(AUGMENTS)}")
    if cfg.crop_padding < 0:
        raise ValueError(f"data.crop_padding={cfg.crop_padding} must be >= 0")


# ---------------------------------------------------------------- the datamodule


class _Batches(Dataset):
    """Batch i of ``index`` converted on access (val: the split in order, no augmentation)."""

    def __init__(self, convert, index: torch.Tensor, batch_size: int):
        self.convert, self.index, self.batch_size = convert, index, batch_size

    def __len__(self) -> int:
        return math.ceil(len(self.index) / self.batch_size)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.convert(self.index[i * self.batch_size : (i + 1) * self.batch_size])


class ImageDataModule(StepDataModule):
    """Train batches drawn per step from uint8 images; val in fixed order."""

    def __init__(self, cfg: ImageDataConfig, batch_size: int, seed: int):
        super().__init__()
        check_image_config(cfg, batch_size)
        self.cfg, self.batch_size, self.seed = cfg, batch_size, seed
        self.start_step = 0
        self.ready = False
        self._perm: tuple[int, torch.Tensor] = (-1, torch.empty(0, dtype=torch.long))

    def setup(self, stage: str | None = None) -> None:
        if self.ready:
            return
        if self.cfg.source == "digits":
            self._setup_digits()
        else:
            self._setup_cached()
        self.in_chans, self.image_size = self.images.shape[1], self.images.shape[-1]
        self.ready = True

    def _setup_digits(self) -> None:
        images, labels, self.num_classes = load_digits()
        self.scale = 16.0
        if self.cfg.image_size is not None and self.cfg.image_size != 8:
            size = (self.cfg.image_size,) * 2
            pixels = torch.from_numpy(images).float() / self.scale
            images = F.interpolate(pixels, size=size, mode="bilinear", antialias=True).numpy()
            self.scale = 1.0
        self.images, self.labels = images, torch.from_numpy(labels)
        digest = hashlib.sha256(np.ascontiguousarray(images).tobytes() + labels.tobytes())
        self.identity = f"digits:{digest.hexdigest()[:12]}"  # recorded with the run
        self.val_images, self.val_labels = images, self.labels
        self.train_idx, self.val_idx = fixed_split(len(images), self.cfg.val_fraction)
        train = torch.from_numpy(images[self.train_idx.numpy()]).float() / self.scale
        self._set_stats(train.mean(dim=(0, 2, 3)), train.std(dim=(0, 2, 3)))

    def _setup_cached(self) -> None:
        entry = prepare_images(self.cfg)
        self.identity = entry.identity  # recorded with the run: a resume checks it
        self.num_classes, self.scale = entry.meta["num_classes"], 255.0
        self.images, self.labels = (
            entry.array("train_x"),
            torch.from_numpy(np.array(entry.array("train_y"))),
        )
        if "val_x" in entry.meta["arrays"]:
            self.val_images = entry.array("val_x")
            self.val_labels = torch.from_numpy(np.array(entry.array("val_y")))
            self.train_idx = torch.arange(len(self.images))
            self.val_idx = torch.arange(len(self.val_images))
        else:
            self.val_images, self.val_labels = self.images, self.labels
            self.train_idx, self.val_idx = fixed_split(len(self.images), self.cfg.val_fraction)
        self._set_stats(*channel_stats(self.images, self.train_idx.numpy(), self.scale))

    def _set_stats(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        self.mean, self.std = mean.float(), std.float().clamp_min(1e-6)
        self._mean, self._std = self.mean.view(1, -1, 1, 1), self.std.view(1, -1, 1, 1)

    def _ready(self) -> None:
        if not self.ready:
            raise RuntimeError("call dm.setup() before using the loaders")

    def convert(self, images: np.ndarray, idx: torch.Tensor, labels: torch.Tensor):
        """(normalized float images, labels) of rows ``idx``."""
        pixels = torch.from_numpy(np.ascontiguousarray(images[idx.numpy()])).float() / self.scale
        return (pixels - self._mean) / self._std, labels[idx]

    def train_batch(
        self, step: int, batch_size: int | None = None, rows: slice | None = None
    ) -> tuple[torch.Tensor, ...]:
        """Rows ``rows`` of step ``step``'s train batch, a pure function of (seed, step)."""
        self._ready()
        b, n = batch_size or self.batch_size, len(self.train_idx)
        if b > n:
            raise ValueError(f"batch of {b} exceeds the {n} train images; lower data.batch_size")
        rows = rows or slice(None)
        epoch, i = divmod(step, n // b)
        if self._perm[0] != epoch:
            self._perm = (epoch, torch.randperm(n, generator=step_generator(self.seed, epoch)))
        idx = self.train_idx[self._perm[1][i * b : (i + 1) * b][rows]]
        x, y = self.convert(self.images, idx, self.labels)
        for name in self.cfg.augment:
            gen = stream_generator(self.seed, step, list(AUGMENTS).index(name) + 1)
            x = AUGMENTS[name](x, gen, b, rows, self.cfg.crop_padding)
        return x, y

    def train_dataloader(self) -> DataLoader:
        self._ready()
        return DataLoader(
            StepBatches(self.train_batch, self.batch_size, self.start_step), batch_size=None
        )

    def val_dataloader(self) -> DataLoader:
        """The whole val split, in its fixed order."""
        self._ready()

        def convert(idx: torch.Tensor):
            return self.convert(self.val_images, idx, self.val_labels)

        return DataLoader(_Batches(convert, self.val_idx, self.batch_size), batch_size=None)


def channel_stats(images: np.ndarray, idx: np.ndarray, scale: float, chunk: int = 4096):
    """Per-channel mean and (unbiased) std of ``images[idx] / scale``, in float64 chunks."""
    c = images.shape[1]
    total, squares, count = np.zeros(c), np.zeros(c), 0
    for start in range(0, len(idx), chunk):
        part = images[np.sort(idx[start : start + chunk])].astype(np.float64) / scale
        total += part.sum(axis=(0, 2, 3))
        squares += (part**2).sum(axis=(0, 2, 3))
        count += part.shape[0] * part.shape[2] * part.shape[3]
    mean = total / count
    var = (squares - count * mean**2) / max(1, count - 1)
    return torch.from_numpy(mean), torch.from_numpy(np.sqrt(np.maximum(var, 0.0)))
