"""What every benchmark section shares: the run's settings (BenchConfig), one measured row
(Result), the model sizes per mode, and the timing discipline. Contenders are warmed up, then
timed in alternation (A, B, A, B, ...) so a busy machine slows each alike, and reported as
medians with ratios to a baseline; a training step is forward + backward + the same AdamW step
for every contender, under autocast when the run is bf16.
"""

from __future__ import annotations

import ctypes
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class BenchConfig:
    device: str = "cpu"
    quick: bool = False
    warmup: int = 2  # untimed calls per contender
    reps: int = 7  # timed rounds; in each, every contender runs `iters` calls
    iters: int = 1
    clock: str = "wall"  # wall | cpu (this process's CPU time: immune to other jobs)
    precision: str = "32"  # 32 | bf16 (autocast; the default on CUDA)
    compile: bool = False  # torch.compile the forward and loss of the compared models (CUDA)
    # The gpt section runs its contenders once per mode (compile=False, compile=True).
    modes: tuple[bool, ...] = (False,)

    @property
    def size(self) -> str:
        return "quick" if self.quick else self.device


@dataclass
class Result:
    section: str
    name: str
    value: float | None  # None unless status is "ok"
    unit: str = ""
    ratio: float | None = None  # speed relative to the section's baseline, medians (>1: faster)
    best: float | None = None  # the same ratio from each contender's fastest round
    note: str = ""
    status: str = "ok"  # ok | skipped (an optional piece is absent) | error
    # The speed ratio within each round (the contenders of a round ran back to back): lowest
    # and highest over the rounds, the spread around `ratio`.
    spread: tuple[float, float] | None = None
    threads: int | None = None  # torch CPU threads the row ran with (set by the CLI)


def skip(section: str, name: str, why: str) -> Result:
    return Result(section, name, None, note=why, status="skipped")


def one_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}"


@dataclass(frozen=True)
class LMSize:
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    vocab_size: int
    batch_size: int


GPT_SIZES = {
    "quick": LMSize(2, 2, 32, 32, 64, 4),
    "cpu": LMSize(6, 8, 256, 256, 256, 16),
    "cuda": LMSize(12, 12, 768, 1024, 50304, 12),  # GPT-2 small
}
GRID_SIZES = {  # placement x norm: the 6 x 128 GPT (the 2026-11 default job) on CPU, bf16 on GPU
    "quick": LMSize(2, 2, 32, 32, 64, 4),
    "cpu": LMSize(6, 4, 128, 128, 256, 32),
    "cuda": LMSize(6, 12, 768, 1024, 50304, 8),
}
VIT_SIZES = {  # (ViTConfig fields, batch size)
    "quick": (dict(image_size=8, patch_size=2, in_chans=1, n_layer=2, n_head=2, n_embd=32), 8),
    "cpu": (dict(image_size=32, patch_size=4, in_chans=3, n_layer=6, n_head=8, n_embd=256), 64),
    "cuda": (
        dict(image_size=224, patch_size=16, in_chans=3, n_layer=12, n_head=12, n_embd=768),
        64,
    ),
}
# (B, T, C): the CPU GPT's activations, and GPT-2 small's width at a batch whose tensors (25 MB)
# stay below glibc's largest mmap threshold (see keep_freed_memory).
NORM_SHAPES = {"quick": [(4, 32, 32)], "cpu": [(16, 256, 256), (8, 1024, 768)]}
NORM_SHAPES["cuda"] = NORM_SHAPES["cpu"]


# ---------------------------------------------------------------- timing
def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory in the process (no trimming, heap up to 32 MB a block).

    Otherwise a contender's freed activations go back to the OS and the next contender pays
    the page faults of getting them again, a cost that depends on who ran before. Linux/glibc
    only; returns whether both settings took.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    trim = libc.mallopt(M_TRIM_THRESHOLD, 2**30)
    mmap = libc.mallopt(M_MMAP_THRESHOLD, 32 * 2**20)  # glibc's maximum on 64-bit
    return bool(trim and mmap)


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def synchronize(bc: BenchConfig) -> None:
    if bc.device == "cuda":
        torch.cuda.synchronize()


def warm(fn: Callable[[], object], bc: BenchConfig, own_bytes: int = 0) -> float | None:
    """Run the warmup calls. On CUDA return this contender's peak memory in GiB: the peak above
    what was allocated before (other contenders' state), plus its own weights."""
    if bc.device == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    for _ in range(max(bc.warmup, 1)):
        fn()
    if bc.device != "cuda":
        return None
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base + own_bytes) / 2**30


def interleaved(fns: dict[str, Callable[[], object]], bc: BenchConfig) -> dict[str, list[float]]:
    """Seconds per call of each (already warm) function in every round, timed in alternation."""
    clock, times = CLOCKS[bc.clock], {name: [] for name in fns}
    for _ in range(bc.reps):
        for name, fn in fns.items():
            synchronize(bc)
            start = clock()
            for _ in range(bc.iters):
                fn()
            synchronize(bc)
            times[name].append((clock() - start) / bc.iters)
    return times


def round_ratios(base: list[float], times: list[float]) -> list[float]:
    """Speed relative to `base` in each round: base's seconds over the contender's."""
    return [b / t for b, t in zip(base, times, strict=True)]


def speed_results(
    section: str, times: dict[str, list[float]], base: str, work: float, unit: str, note: str
) -> list[Result]:
    """`work` units per call / median seconds, with ratios to `base` (medians and best rounds)
    and the spread of the per-round ratio."""
    med = {k: statistics.median(v) for k, v in times.items()}
    fast = {k: min(v) for k, v in times.items()}
    out = []
    for k in times:
        ratio = med[base] / med[k] if base in med else None
        best = fast[base] / fast[k] if base in fast else None
        rounds = round_ratios(times[base], times[k]) if base in times else None
        spread = (min(rounds), max(rounds)) if rounds else None
        value = work / med[k] if work else med[k] * 1e3
        out.append(Result(section, k, value, unit, ratio, best, note, spread=spread))
    return out


def pair_result(section: str, times: dict[str, list[float]], ours: str, other: str) -> Result:
    """How many times faster `ours` ran than `other`: the median of the per-round ratios, with
    their lowest and highest as the spread."""
    rounds = round_ratios(times[other], times[ours])
    note = f"median of {len(rounds)} rounds, each {ours} and {other} back to back"
    name = f"{ours} / {other}"
    return Result(
        section, name, statistics.median(rounds), "x", spread=(min(rounds), max(rounds)), note=note
    )


def autocast(bc: BenchConfig):
    return torch.autocast(bc.device, dtype=torch.bfloat16, enabled=bc.precision == "bf16")


def train_step(model: nn.Module, loss_fn: Callable[[], torch.Tensor], bc: BenchConfig):
    """forward + backward + AdamW step, the same optimizer settings for every contender."""
    fused = True if bc.device == "cuda" else None  # CPU: torch's default implementation
    opt = torch.optim.AdamW(
        model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=fused
    )

    def step() -> None:
        with autocast(bc):
            loss = loss_fn()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def maybe_compile(fn: Callable, bc: BenchConfig) -> Callable:
    # Static shapes: one code object compiled for several models would otherwise turn dynamic.
    return torch.compile(fn, dynamic=False) if bc.compile else fn


def nbytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def check_same(ours: dict, ref: dict, what: str) -> None:
    diff = {k: (ours[k], ref.get(k)) for k in ours if ours[k] != ref.get(k)}
    if diff:
        raise RuntimeError(f"{what}: configurations differ as (normlab, reference): {diff}")
