"""Shared test setup: no network, and the real config composed at a tiny size."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

# Before wandb or datasets are imported anywhere: nothing may reach for the network.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

# The smallest real job: one block, 3 steps, a validation at step 2 and after the fit.
TINY_RUN = [
    "model.n_layer=1",
    "model.n_embd=32",
    "model.n_head=2",
    "model.block_size=16",
    "data.batch_size=4",
    "data.val_batches=1",
    "optim.warmup_steps=2",
    "trainer.max_steps=3",
    "trainer.val_check_interval=2",
    "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "logger=csv",
    "num_threads=1",
]


@pytest.fixture
def tiny_run() -> list[str]:
    return list(TINY_RUN)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Tiny models run fastest on one thread, and do not stall when the cores are shared;
    train.run sets the thread count process-wide, so it is restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def compose_cfg() -> Callable:
    """compose_cfg(overrides) -> the composed config, as train.py's Hydra entry sees it."""
    from hydra import compose, initialize_config_dir

    def compose_fn(overrides: list[str]):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose(config_name="config", overrides=overrides)

    return compose_fn


@pytest.fixture(autouse=True)
def registry_not_frozen(tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> None:
    """Every test sees the registry unfrozen (the pilots' seeds), whatever the checkout's
    analysis/findings/frozen.json holds; a test that needs a freeze makes its own."""
    import analysis.findings as findings

    monkeypatch.setattr(findings, "FROZEN", tmp_path_factory.mktemp("unfrozen") / "frozen.json")
