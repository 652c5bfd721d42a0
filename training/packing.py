"""K runs per GPU across G GPUs of one node: ``pack.gpus=G pack.per_gpu=K`` beside a parallel
launcher of G x K jobs (``hydra/launcher=local hydra.launcher.n_jobs=<G*K>``), and one sweep
split among N launches: ``pack.shard=I/N`` runs the jobs whose number is I modulo N (one SLURM
array task per GPU with K jobs inside: scripts/slurm_pack.sbatch, docs/distributed.md).

A shard's launch keeps its own state below ``<sweep dir>/.shards/<I>-of-<N>/`` (its lock, its
jobs' outcome records, its GPU slots), so the N launches run at once into one sweep dir on
shared storage; the run dirs, the skip-on-rerun and the verdicts are those of one launch. A job
of another shard returns at once, touching nothing.

Each job takes the first free of the sweep's G x K slots, an exclusive lock on
``<sweep dir>/.slots/<s>`` held while it trains, and trains on GPU ``s // K``: never more than
K jobs share a GPU, whatever order the jobs end in (a job dealt GPUs round-robin by its number
would not keep that: a long job 0 and a short job 1 put job 2 beside job 0). The GPU is the
job's ``trainer.devices=[<s // K>]``, an index among the node's visible devices: joblib's (loky)
workers run one job after another and CUDA reads CUDA_VISIBLE_DEVICES once per process, so an
environment variable set by a later job of the same worker would not move it. Torch-free.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SLOTS = ".slots"  # in the launch's state dir
SHARDS = ".shards"  # in the sweep dir: one state dir per shard
HELD: list[int] = []  # [GPU, K] of the slot this process's job holds (training/build.py reads it)
# K when pack.per_gpu is null: four league-size runs at once gave 2.7x the runs per hour of one
# on an H200 (docs/benchmarks.md, 2026-12-04); each job checks after its first step that K of
# it fit the card's memory (``overfull``)
MEASURED_PER_GPU = 4
FITS = 0.9  # of the card's memory: K jobs' peaks must stay under this share


@dataclass(frozen=True)
class PackConfig:
    """``pack.*``: the node's GPUs a sweep's parallel jobs share, K at a time on each."""

    gpus: int | None = None  # G; null: no packing (each job takes trainer.devices as set)
    per_gpu: int | None = None  # K; null: MEASURED_PER_GPU
    shard: str | None = None  # "I/N": this launch runs the jobs numbered I modulo N

    def __post_init__(self) -> None:
        if self.shard is not None:
            self.part  # noqa: B018 - refused here, before any job, when malformed
        if self.gpus is not None and (not isinstance(self.gpus, int) or self.gpus < 1):
            raise ValueError(f"pack.gpus must be an integer >= 1 or null, got {self.gpus!r}")
        if self.per_gpu is not None and (not isinstance(self.per_gpu, int) or self.per_gpu < 1):
            raise ValueError(f"pack.per_gpu must be an integer >= 1 or null, got {self.per_gpu!r}")

    @property
    def part(self) -> tuple[int, int] | None:
        """(I, N) of ``shard``, or None."""
        if self.shard is None:
            return None
        i, _, n = str(self.shard).partition("/")
        try:
            found = int(i), int(n)
        except ValueError:
            found = (-1, 0)
        if not 0 <= found[0] < found[1]:
            raise ValueError(
                f"pack.shard={self.shard!r}: give I/N with 0 <= I < N, e.g. "
                "pack.shard=$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT"
            )
        return found

    def elsewhere(self, job_num: int) -> bool:
        """Whether the sweep's job ``job_num`` belongs to another shard's launch."""
        part = self.part
        return part is not None and job_num % part[1] != part[0]

    def state_dir(self, sweep_dir: str | Path) -> Path:
        """Where this launch keeps its lock, outcome records and slots: the sweep dir, or its
        shard's own dir below it."""
        part = self.part
        return (
            Path(sweep_dir) if part is None else Path(sweep_dir) / SHARDS / "{}-of-{}".format(*part)
        )

    @property
    def k(self) -> int:
        return self.per_gpu or MEASURED_PER_GPU

    @property
    def slots(self) -> int:
        return (self.gpus or 0) * self.k


def read_pack(cfg) -> PackConfig:
    """A composed config's ``pack.*`` as its dataclass (a bad value raises ConfigError)."""
    from runs.checks import node_to

    return node_to(PackConfig, cfg.get("pack") or {}, "pack")


class NoFreeSlot(RuntimeError):
    """Every slot is held: the launcher runs more jobs at once than G x K."""


@contextlib.contextmanager
def gpu_slot(sweep_dir: str | Path, pack: PackConfig) -> Iterator[int]:
    """The GPU index this job trains on, its slot held until the block ends (the slots of its
    shard's launch: one node's GPUs)."""
    folder = pack.state_dir(sweep_dir) / SLOTS
    folder.mkdir(parents=True, exist_ok=True)
    for slot in range(pack.slots):
        fd = os.open(folder / str(slot), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        HELD[:] = [slot // pack.k, pack.k]
        try:
            yield slot // pack.k
        finally:
            HELD.clear()
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        return
    raise NoFreeSlot(
        f"all {pack.slots} slots of pack.gpus={pack.gpus} x pack.per_gpu={pack.k} are "
        f"held: run at most {pack.slots} jobs at once (hydra.launcher.n_jobs={pack.slots})"
    )


def packed_devices(kwargs: dict) -> dict:
    """Lightning's Trainer arguments with the held GPU as the job's device, on a GPU run."""
    if HELD and str(kwargs.get("accelerator", "auto")) in ("gpu", "cuda", "auto"):
        return {**kwargs, "devices": [HELD[0]]}
    return kwargs


def overfull(per_gpu: int, peak_bytes: int, card_bytes: int) -> str | None:
    """Why K jobs of this one's peak memory do not fit the card (None when they do)."""
    if per_gpu * peak_bytes <= FITS * card_bytes:
        return None
    fits = max(1, int(FITS * card_bytes // max(peak_bytes, 1)))
    return (
        f"pack.per_gpu={per_gpu} runs of {peak_bytes / 2**30:.1f} GiB peak each do not fit the "
        f"GPU's {card_bytes / 2**30:.1f} GiB; set pack.per_gpu={fits}"
    )
