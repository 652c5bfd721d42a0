"""A tiny task, a capturing logger and a short fit for the probe tests."""

from __future__ import annotations

import copy

import lightning.pytorch as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import Logger
from torch.utils.data import DataLoader

TINY = dict(vocab_size=23, block_size=8, n_layer=3, n_head=2, n_embd=16)


class TinyTask(L.LightningModule):
    """Exposes ``.model`` like the real tasks; can inject a NaN loss at one step."""

    def __init__(self, model: torch.nn.Module, lr: float = 1e-2, nan_at: int | None = None):
        super().__init__()
        self.model, self.lr, self.nan_at = model, lr, nan_at
        self.steps_run = 0

    def training_step(self, batch, batch_idx):
        _, loss = self.model(*batch)
        self.steps_run += 1
        if self.global_step == self.nan_at:
            loss = loss * float("nan")
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.model.parameters(), lr=self.lr)


class CaptureLogger(Logger):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[int, dict]] = []

    @property
    def name(self) -> str:
        return "capture"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass

    def log_metrics(self, metrics, step=None) -> None:
        self.rows.append((step, dict(metrics)))

    def value(self, step: int, key: str) -> float:
        found = [m[key] for s, m in self.rows if s == step and key in m]
        assert len(found) == 1, f"{key} at step {step}: {found}"
        return found[0]


class Snapshots(Callback):
    """Weights at the start of each step and gradients before the optimizer step."""

    def __init__(self) -> None:
        self.weights: dict[int, dict] = {}
        self.grads: dict[int, dict] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.weights[trainer.global_step] = copy.deepcopy(pl_module.model.state_dict())

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.grads[trainer.global_step] = {
            n: p.grad.detach().clone() for n, p in pl_module.model.named_parameters()
        }


def batches(n: int, batch_size: int = 6, seed: int = 0) -> list[tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(seed)
    seq = torch.randint(0, TINY["vocab_size"], (n, batch_size, TINY["block_size"] + 1), generator=g)
    return [(s[:, :-1], s[:, 1:]) for s in seq]


class TinyData(L.LightningDataModule):
    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps = steps

    def train_dataloader(self):
        return DataLoader(batches(self.steps), batch_size=None)

    def val_dataloader(self):
        return DataLoader(batches(2, seed=1), batch_size=None)


def fit(task, callbacks, steps: int, tmp_path, **trainer_kwargs) -> tuple[L.Trainer, CaptureLogger]:
    logger = CaptureLogger()
    trainer = L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        logger=logger,
        callbacks=callbacks,
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        default_root_dir=tmp_path,
        **trainer_kwargs,
    )
    trainer.fit(task, datamodule=TinyData(steps))
    return trainer, logger


def flat_norm(grads: dict[str, torch.Tensor], prefix: str = "") -> float:
    return float(torch.cat([g.flatten() for n, g in grads.items() if n.startswith(prefix)]).norm())


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, and do not stall when the cores are shared;
    importing this fixture into a test module applies it to the whole module."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
