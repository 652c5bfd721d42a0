"""Every rank takes the same decision for each rank-dependent control: QK-clip rescales by the
max logit over the global batch (and over every micro-batch of a step), skip_step scores the
global batch's loss; so under DDP the ranks' weights stay equal (gloo, two CPU processes)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from tests.conftest import ROOT, TINY_RUN


def on_two_ranks(fn, tmp_path) -> None:
    """``fn(rank, out_dir)`` in two processes of one gloo group."""
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = (
        "127.0.0.1",
        str(29500 + os.getpid() % 999),
    )
    mp.spawn(run_rank, args=(fn, str(tmp_path)), nprocs=2, join=True)


def run_rank(rank: int, fn, out: str) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        fn(rank, out)
    finally:
        dist.destroy_process_group()


class TwoHeads(nn.Module):
    """The attributes QK-clip edits: q and k projections over two heads."""

    def __init__(self) -> None:
        super().__init__()
        self.n_head, self.q_proj, self.k_proj = 2, nn.Linear(4, 4), nn.Linear(4, 4)


def qk_clip_rank(rank: int, out: str) -> None:
    from models.qk_clip import QKClip

    torch.manual_seed(0)
    attn = TwoHeads()
    clip = QKClip.__new__(QKClip)  # the rescale alone: no forward hook, logits given
    clip.attentions, clip.tau, clip.clipped_heads = [attn], 10.0, 0
    # rank 0 saw head 0 at 40, rank 1 saw head 1 at 90: each head's global max is over tau
    clip.last = {0: torch.tensor([40.0, 5.0]) if rank == 0 else torch.tensor([5.0, 90.0])}
    assert clip.clip() == 2  # both heads, on both ranks
    torch.save(attn.state_dict(), f"{out}/qk{rank}.pt")


def skip_step_rank(rank: int, out: str) -> None:
    from training.guards import Guarded

    torch.manual_seed(0)
    w = nn.Parameter(torch.ones(3))
    opt = Guarded(torch.optim.SGD([w], lr=0.1), ["skip_step"])
    for step in range(80):
        w.grad = torch.full((3,), 0.1)  # DDP all-reduced: equal on both ranks
        # rank 1's own loss jumps at step 70 (a 6-sigma outlier of its own), rank 0's does not;
        # the global batch's mean moves far less: the same decision on both ranks
        loss = 1.0 + 0.01 * (step % 5) + (5.0 if rank == 1 and step == 70 else 0.0)
        opt.step(lambda loss=loss: torch.tensor(loss))
    torch.save({"w": w.detach().clone(), "skipped": opt.counts()["skipped_steps"]},
               f"{out}/skip{rank}.pt")  # fmt: skip


@pytest.mark.parametrize("check,name", [(qk_clip_rank, "qk"), (skip_step_rank, "skip")])
def test_each_rank_decides_on_global_values(check, name, tmp_path) -> None:
    on_two_ranks(check, tmp_path)
    a, b = (torch.load(tmp_path / f"{name}{r}.pt") for r in (0, 1))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(torch.as_tensor(a[key]), torch.as_tensor(b[key])), key


@pytest.mark.slow  # two processes training: ~30 s
def test_ddp_with_qk_clip_keeps_the_ranks_weights_equal(tmp_path) -> None:
    ddp = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
           "trainer.precision=32-true", "trainer.max_steps=20", "model.qk_clip=0.5",
           "model.qk_norm=false",
           "+callbacks.dump._target_=tests.helpers.DumpRankWeights", "logger=csv",
           f"+callbacks.dump.out={tmp_path}", f"hydra.run.dir={tmp_path / 'run'}"]  # fmt: skip
    proc = subprocess.run([sys.executable, "train.py", *TINY_RUN, *ddp], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    assert max(float((a[k] - b[k]).abs().max()) for k in a) == 0.0
