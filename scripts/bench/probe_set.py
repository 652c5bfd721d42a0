"""What the probes cost per training step, set against the same step without them.

One process, one model, one optimizer. Blocks of training steps alternate between a plain step
(forward, backward, AdamW) and the same step with the real probe callbacks' hooks called where a
Trainer calls them (batch start, before the optimizer step, batch end after the step counter
moved on). The step counter runs on across blocks, and a block is a multiple of the probes'
intervals, so every probe fires at its true rate. Reports the median time per step of each
variant, their ratio, and each callback's own time per step (its hooks' time over all steps).

    python -m scripts.bench probe_set          # GPT 6 x 128, ctx 128, batch 32 (2026-11 default)
    python -m scripts.bench probe_set --probes grad_norm,act_norm --sharpness-every 100
    python -m scripts.bench probe_set --threads 1 --clock cpu   # steadier on a shared machine
    python -m scripts.bench probe_set --each --probes attn_sink,spectral   # each probe alone

``--each`` runs every named probe at every step, each with callbacks (and a forward pass) of its
own, and reports each one's time per firing and, at its default interval, its share of a plain
step.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from types import SimpleNamespace

import torch
from lightning.pytorch.plugins.precision import Precision
from torch import nn

from models.gpt import GPT, GPTConfig
from training.probe_config import PROBES, ProbeConfig
from training.probes.registry import probe_callbacks


class Holder(nn.Module):
    """Stands in for the task module: the callbacks read ``.model`` and ``.device``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device


def fake_trainer(optimizer: torch.optim.Optimizer) -> SimpleNamespace:
    """The trainer attributes the callbacks use (no loggers: the cost of a dict append)."""
    return SimpleNamespace(
        global_step=0,
        is_global_zero=True,
        loggers=[],
        optimizers=[optimizer],
        precision_plugin=Precision(),
        strategy=SimpleNamespace(reduce_boolean_decision=lambda decision, all=True: decision),
        accumulate_grad_batches=1,
        checkpoint_callbacks=[],
        should_stop=False,
        datamodule=None,
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m scripts.bench probe_set", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--n-layer", type=int, default=6)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--vocab-size", type=int, default=100)
    p.add_argument("--probes", default=None, help="comma-separated; default: ProbeConfig's set")
    p.add_argument("--sharpness-every", type=int, default=0, help="> 0: add sharpness at this rate")
    p.add_argument(
        "--each", action="store_true", help="time each probe alone, firing at every step"
    )
    p.add_argument("--steps-per-block", type=int, default=10)
    p.add_argument("--blocks", type=int, default=10, help="blocks per variant, interleaved")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    return p.parse_args(argv)


def probe_config(args: argparse.Namespace) -> ProbeConfig:
    enabled = ProbeConfig().enabled if args.probes is None else args.probes.split(",")
    every = {}
    if args.sharpness_every > 0:
        enabled, every = [*enabled, "sharpness"], {"sharpness": args.sharpness_every}
    return ProbeConfig(enabled=enabled, every=every)


def measure(args: argparse.Namespace) -> dict:
    """Median seconds per plain and probed step, and each callback's seconds per step."""
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    cfg = GPTConfig(
        vocab_size=args.vocab_size,
        block_size=args.block_size,
        n_layer=args.n_layer,
        n_head=args.n_head,
        n_embd=args.n_embd,
    )
    module = Holder(GPT(cfg)).to(device)
    opt = torch.optim.AdamW(module.parameters(), lr=1e-4)
    shape = (args.batch_size, args.block_size)
    x = torch.randint(0, cfg.vocab_size, shape, device=device)
    y = torch.randint(0, cfg.vocab_size, shape, device=device)
    probes = probe_config(args)
    batch = (x.cpu(), y.cpu())
    if args.each:  # each probe with callbacks of its own, at every step
        labelled = [
            (name, cb)
            for name in probes.enabled
            for cb in probe_callbacks(ProbeConfig(enabled=[name], every={name: 1}), batch)
        ]
    else:
        labelled = [(type(cb).__name__, cb) for cb in probe_callbacks(probes, batch)]
    callbacks = [cb for _, cb in labelled]
    trainer = fake_trainer(opt)
    for cb in callbacks:
        cb.setup(trainer, module, "fit")
        cb.on_fit_start(trainer, module)
        cb.on_train_start(trainer, module)
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    spent: dict[str, float] = defaultdict(float)
    counting = {"on": False}

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    def call(hook: str, *hook_args) -> None:
        for label, cb in labelled:
            start = clock()
            getattr(cb, hook)(trainer, module, *hook_args)
            sync()
            if counting["on"]:
                spent[label] += clock() - start

    def step(probed: bool) -> None:
        if probed:
            call("on_train_batch_start", (x, y), 0)
        _, loss = module.model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if probed:
            call("on_before_optimizer_step", opt)
        opt.step()
        trainer.global_step += 1
        if probed:
            call("on_train_batch_end", {"loss": loss.detach()}, (x, y), 0)
        else:
            float(loss.detach())  # the task's own loss logging syncs once per step either way

    for _ in range(3):  # warm-up; the probed step comes first so step 0 holds the reference logits
        step(True)
        step(False)
    times: dict[bool, list[float]] = {False: [], True: []}
    counting["on"] = True
    for _ in range(args.blocks):
        for probed in (False, True):
            sync()
            start = clock()
            for _ in range(args.steps_per_block):
                step(probed)
            sync()
            times[probed].append((clock() - start) / args.steps_per_block)
    probed_steps = args.blocks * args.steps_per_block
    return {
        "config": cfg,
        "every": {name: probes.interval(name) for name in probes.enabled},
        "plain_s": statistics.median(times[False]),
        "probed_s": statistics.median(times[True]),
        "blocks": times,
        "per_callback_s": {name: s / probed_steps for name, s in spent.items()},
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    r = measure(args)
    cfg, plain, probed = r["config"], r["plain_s"], r["probed_s"]
    print(
        f"GPT {cfg.n_layer}x{cfg.n_embd}, ctx {cfg.block_size}, batch {args.batch_size}, ", end=""
    )
    print(f"{args.device}, threads {torch.get_num_threads()}, {args.clock} clock")
    print(f"probe intervals: {r['every']}")
    for name, probed_flag in (("plain", False), ("probed", True)):
        blocks = [round(t * 1e3) for t in r["blocks"][probed_flag]]
        print(f"{name:7s} {r[name + '_s'] * 1e3:8.2f} ms/step   (blocks: {blocks})")
    for name, s in sorted(r["per_callback_s"].items(), key=lambda kv: -kv[1]):
        if args.each:  # s is per firing; at its default interval it fires every PROBES[..] steps
            every = PROBES[name].every
            print(
                f"  {name:18s} {s * 1e3:7.2f} ms a firing; every {every:3d} steps by default: "
                f"{s / every / plain:6.2%} of a plain step"
            )
        else:
            print(f"  {name:18s} {s * 1e3:7.2f} ms/step  ({s / plain:6.2%} of a plain step)")
    print(f"overhead ratio probed/plain = {probed / plain:.3f}")
    return r


if __name__ == "__main__":
    main()
