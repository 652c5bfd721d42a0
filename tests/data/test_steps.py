"""Step-indexed batches: generators, rank slices, the checkpointed next step."""

from __future__ import annotations

import torch

import data.steps
from data.steps import StepBatches, StepDataModule, step_generator, stream_generator
from tests.data.helpers import take


def test_generators_are_pure_functions_of_seed_step_and_stream():
    def draw(gen: torch.Generator) -> list[int]:
        return torch.randint(0, 10**9, (4,), generator=gen).tolist()

    assert draw(step_generator(3, 7)) == draw(step_generator(3, 7))
    assert draw(step_generator(3, 7)) == draw(torch.Generator().manual_seed(3 * 1_000_003 + 7))
    assert draw(stream_generator(3, 7, 1)) == draw(stream_generator(3, 7, 1))
    others = [step_generator(3, 8), stream_generator(3, 7, 2), stream_generator(4, 7, 1)]
    assert all(draw(g) != draw(stream_generator(3, 7, 1)) for g in others)


def test_each_rank_gets_its_slice_of_the_global_batch(monkeypatch):
    calls = []

    def make(step: int, global_batch: int, rows: slice):
        calls.append((step, global_batch))
        full = torch.arange(global_batch) + 100 * step
        return (full[rows],)

    for rank in range(3):
        monkeypatch.setattr(data.steps, "rank_and_world", lambda r=rank: (r, 3))
        batches = take(StepBatches(make, batch_size=2, start_step=4), 2)
        assert [b[0].tolist() for b in batches] == [
            [400 + 2 * rank, 401 + 2 * rank],
            [500 + 2 * rank, 501 + 2 * rank],
        ]
    assert set(calls) == {(4, 6), (5, 6)}


def test_the_checkpointed_state_is_the_next_step():
    dm = StepDataModule()
    assert dm.state_dict() == {"start_step": 0}
    dm.load_state_dict({"start_step": 12})
    assert dm.start_step == 12 and dm.state_dict() == {"start_step": 12}
