"""Step-indexed batches: the train batch of optimizer step s is a pure function of (seed, s).

Nothing about a batch depends on what ran before it, so a run resumed at step s draws exactly the
batches an uninterrupted run draws from step s on, and a DDP run over W ranks of batch B sees the
rows one process with batch W x B sees. The only state a datamodule checkpoints is the next step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import lightning.pytorch as L
import numpy as np
import torch
from torch.utils.data import IterableDataset

# make(step, global_batch, rows) -> the rows ``rows`` of step ``step``'s global batch
MakeBatch = Callable[[int, int, slice], tuple]


def step_generator(seed: int, step: int) -> torch.Generator:
    """The generator behind step ``step``'s batch: a pure function of (seed, step)."""
    return torch.Generator().manual_seed(seed * 1_000_003 + step)


def stream_generator(seed: int, step: int, stream: int) -> torch.Generator:
    """A second generator of step ``step`` (e.g. an augmentation's), independent of the batch's
    ``step_generator`` and of other streams: SeedSequence hashes (seed, step, stream)."""
    state = np.random.SeedSequence([seed, step, stream, 2]).generate_state(1)[0]
    return torch.Generator().manual_seed(int(state))


def rank_and_world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class StepBatches(IterableDataset):
    """Endless batches for step = start_step, start_step + 1, ...

    Under DDP every rank draws the same global batch (batch_size * world rows) and keeps its own
    slice, so ranks see disjoint data and one process with world x batch_size sees the same rows.
    ``make`` receives the slice so it can gather only this rank's rows.
    """

    def __init__(self, make: MakeBatch, batch_size: int, start_step: int = 0):
        self.make, self.batch_size, self.start_step = make, batch_size, start_step

    def __iter__(self) -> Iterator[tuple]:
        rank, world = rank_and_world()
        rows = slice(rank * self.batch_size, (rank + 1) * self.batch_size)
        step = self.start_step
        while True:
            yield self.make(step, self.batch_size * world, rows)
            step += 1


class StepDataModule(L.LightningDataModule):
    """A datamodule whose train batch for step s depends only on (seed, s): its checkpointed state
    is the next step to draw, so a resumed run continues the same batch sequence."""

    start_step: int = 0

    def state_dict(self) -> dict:
        """The next train step to draw; a run restored from it continues the same batch sequence."""
        trainer = self.trainer
        if trainer is None:
            return {"start_step": self.start_step}
        return {"start_step": trainer.global_step * trainer.accumulate_grad_batches}

    def load_state_dict(self, state_dict: dict) -> None:
        self.start_step = int(state_dict["start_step"])
