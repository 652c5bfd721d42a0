"""Wall-time overhead of the probe callbacks at their default intervals.

One process, one model, one optimizer: blocks of training steps alternate between a plain step
(forward, backward, AdamW) and the same step plus the real callbacks' hooks (GradNormProbe,
ForwardProbes, Divergence) called as a Trainer would call them. The step counter runs on across
blocks so each probe fires at its true rate. Prints the median seconds per step of each variant
and their ratio.

    python -m scripts.bench.probes             # GPT 6 x 128, ctx 128, batch 32 (2026-11 default)
    python -m scripts.bench.probes --n-layer 24 --device cuda
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

import torch
from lightning.pytorch.plugins.precision import Precision
from torch import nn

from models.gpt import GPT, GPTConfig
from training.probes import ProbeConfig, probe_callbacks


class Holder(nn.Module):
    """Stands in for the task module: the callbacks read ``.model`` and ``.device``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device


def fake_trainer() -> SimpleNamespace:
    """The trainer attributes the callbacks use (no loggers: the cost of a dict append)."""
    return SimpleNamespace(
        global_step=0,
        is_global_zero=True,
        loggers=[],
        precision_plugin=Precision(),
        strategy=SimpleNamespace(reduce_boolean_decision=lambda decision, all=True: decision),
        accumulate_grad_batches=1,
        checkpoint_callbacks=[],
        should_stop=False,
        datamodule=None,
    )


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n-layer", type=int, default=6)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--vocab-size", type=int, default=100)
    p.add_argument("--steps-per-block", type=int, default=10)
    p.add_argument("--blocks", type=int, default=10, help="blocks per variant, interleaved")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: process CPU time, steadier than wall time on a shared machine (use --threads 1)",
    )
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    cfg = GPTConfig(
        vocab_size=args.vocab_size,
        block_size=args.block_size,
        n_layer=args.n_layer,
        n_embd=args.n_embd,
    )
    module = Holder(GPT(cfg)).to(device)
    opt = torch.optim.AdamW(module.parameters(), lr=1e-4)
    shape = (args.batch_size, args.block_size)
    x = torch.randint(0, cfg.vocab_size, shape, device=device)
    y = torch.randint(0, cfg.vocab_size, shape, device=device)
    probes = ProbeConfig()
    callbacks = probe_callbacks(probes, probe_batch=x[: probes.batch_size].cpu())
    trainer = fake_trainer()
    for cb in callbacks:
        cb.setup(trainer, module, "fit")
        cb.on_fit_start(trainer, module)
        cb.on_train_start(trainer, module)

    def step(probed: bool) -> None:
        if probed:
            for cb in callbacks:
                cb.on_train_batch_start(trainer, module, (x, y), 0)
        _, loss = module.model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if probed:
            for cb in callbacks:
                cb.on_before_optimizer_step(trainer, module, opt)
        opt.step()
        if probed:
            for cb in callbacks:
                cb.on_train_batch_end(trainer, module, {"loss": loss.detach()}, (x, y), 0)
        else:
            float(loss.detach())  # the task's own loss logging syncs once per step either way
        trainer.global_step += 1

    for _ in range(3):  # warm-up; the probed step comes first so step 0 holds the reference logits
        step(True)
        step(False)
    times: dict[bool, list[float]] = {False: [], True: []}
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    for _ in range(args.blocks):
        for probed in (False, True):
            sync(device)
            start = clock()
            for _ in range(args.steps_per_block):
                step(probed)
            sync(device)
            times[probed].append((clock() - start) / args.steps_per_block)
    plain, probed = statistics.median(times[False]), statistics.median(times[True])
    every = {name: probes.interval(name) for name in probes.enabled}
    print(
        f"GPT {cfg.n_layer}x{cfg.n_embd}, ctx {cfg.block_size}, batch {args.batch_size}, {device}"
    )
    print(f"probe intervals: {every}")
    print(
        f"plain   {plain * 1e3:8.2f} ms/step   (blocks: {[round(t * 1e3) for t in times[False]]})"
    )
    print(
        f"probed  {probed * 1e3:8.2f} ms/step   (blocks: {[round(t * 1e3) for t in times[True]]})"
    )
    print(f"overhead ratio probed/plain = {probed / plain:.3f}")


if __name__ == "__main__":
    main()
