"""normlab against nanoGPT on the same work: nanoGPT's CPU recipe for its character-level
Shakespeare model (its README's command: 4 layers, 4 heads, width 128, context 64, batch 12,
2000 iterations, AdamW at lr 1e-3 with betas (0.9, 0.99) and weight decay 0.1, 100 warmup
iterations then cosine decay to 1e-4, gradient clipping at 1.0, no dropout, no biases) on
normlab's embedded text, each side with its own model and training loop:

- normlab: train.py's run at those settings (``normlab_overrides``), Lightning and all.
- nanoGPT: its own ``model.py`` (``GPT``, ``GPTConfig``, ``configure_optimizers``), loaded from a
  clone of github.com/karpathy/nanoGPT (``--nanogpt DIR``), trained as nanoGPT's train.py trains
  on a CPU: its learning-rate rule (``nanogpt_lr``), clip, step.

Both see the same train batches in the same order (normlab's data module draws step k's batch
from (seed, k)) and are scored on the same validation windows, so each seed is a pair. What
still differs: normlab's LayerNorms keep their bias (nanoGPT's bias=False drops those too), its
warmup is (k + 1) / 100 rather than (k + 1) / 101, and its cosine runs from step 100 to 2000
where nanoGPT's does the same over its own 2000 iterations (the schedules agree to 1%).

    python -m scripts.bench anchor --nanogpt ~/nanoGPT            # 2 seeds each, 2000 steps
    python -m scripts.bench anchor --nanogpt ~/nanoGPT --steps 200 --seeds 0 --out anchor.json
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import math
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from analysis.stats import mean_interval
from scripts.bench.harness import compose_train_cfg


@dataclass(frozen=True)
class Recipe:
    """nanoGPT's README command for a CPU (config/train_shakespeare_char.py with its flags)."""

    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 64
    batch_size: int = 12
    steps: int = 2000
    lr: float = 1e-3
    min_lr_ratio: float = 0.1  # min_lr 1e-4
    warmup: int = 100
    beta2: float = 0.99
    weight_decay: float = 0.1
    clip: float = 1.0
    val_batches: int = 50  # 50 x 12 windows of 64: 38,400 validation tokens, both sides alike


def normlab_overrides(r: Recipe, seed: int, run_dir: Path) -> list[str]:
    """train.py's overrides for the recipe: textbook Pre-LN (no QK-norm), GPT-2's init."""
    return [
        "placement=pre", "norm=layernorm", "model.qk_norm=false", "model.init=gpt2",
        "model.bias=false", "model.dropout=0.0", "model.activation=gelu",
        f"model.n_layer={r.n_layer}", f"model.n_head={r.n_head}", f"model.n_embd={r.n_embd}",
        f"model.block_size={r.block_size}", f"data.batch_size={r.batch_size}",
        f"data.val_batches={r.val_batches}", "optim=adamw", f"optim.lr={r.lr}",
        f"optim.betas=[0.9,{r.beta2}]", f"optim.weight_decay={r.weight_decay}",
        f"optim.warmup_steps={r.warmup}", "optim.schedule=cosine",
        f"optim.min_lr_ratio={r.min_lr_ratio}", f"trainer.max_steps={r.steps}",
        f"trainer.gradient_clip_val={r.clip}", f"trainer.val_check_interval={r.steps}",
        "trainer.enable_progress_bar=false", "logger=csv", "num_threads=1", f"seed={seed}",
        f"run_dir={run_dir}",
    ]  # fmt: skip


def nanogpt_lr(it: int, r: Recipe) -> float:
    """nanoGPT's learning rate at iteration ``it``: linear warmup, then cosine to min_lr."""
    if it < r.warmup:
        return r.lr * (it + 1) / (r.warmup + 1)
    min_lr = r.lr * r.min_lr_ratio
    if it > r.steps:
        return min_lr
    ratio = (it - r.warmup) / (r.steps - r.warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (r.lr - min_lr)


def load_nanogpt(directory: Path):
    """nanoGPT's model.py from a clone, as a module."""
    path = Path(directory).expanduser() / "model.py"
    if not path.is_file():
        raise SystemExit(
            f"error: no nanoGPT model.py in {directory}; clone it (git clone "
            "https://github.com/karpathy/nanoGPT) and pass --nanogpt <that dir>"
        )
    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def val_loss(model, dm) -> float:
    """The mean loss over the data module's validation batches (normlab's val/loss windows)."""
    model.eval()
    with torch.no_grad():
        losses = [float(model(x.contiguous(), y.contiguous())[1]) for x, y in dm.val_dataloader()]
    model.train()
    return statistics.fmean(losses)


def train_nanogpt(nanogpt, dm, r: Recipe, seed: int) -> float:
    """nanoGPT's model and optimizer groups, its lr rule, clip and step, on normlab's batches."""
    torch.manual_seed(seed)
    config = nanogpt.GPTConfig(
        block_size=r.block_size, vocab_size=dm.vocab_size, n_layer=r.n_layer, n_head=r.n_head,
        n_embd=r.n_embd, dropout=0.0, bias=False,
    )  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):  # its parameter-count prints
        model = nanogpt.GPT(config)
        opt = model.configure_optimizers(r.weight_decay, r.lr, (0.9, r.beta2), "cpu")
    for it in range(r.steps):
        for group in opt.param_groups:
            group["lr"] = nanogpt_lr(it, r)
        x, y = (t.contiguous() for t in dm.train_batch(it))  # as nanoGPT's get_batch
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), r.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return val_loss(model, dm)


def train_normlab(r: Recipe, seed: int, out: Path):
    """train.py's run at the recipe; its final val loss and its data module (built alike)."""
    import train
    from training.build import build_data
    from training.run_config import typed_config

    cfg = compose_train_cfg(normlab_overrides(r, seed, out / f"normlab-s{seed}"))
    with contextlib.redirect_stdout(io.StringIO()):
        summary = train.run(cfg)
    dm = build_data(typed_config(cfg))
    dm.setup()
    return summary["final_val_loss"], dm


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nanogpt", type=Path, required=True, help="a clone of karpathy/nanoGPT")
    p.add_argument("--seeds", default="0,1", help="comma-separated seeds (default 0,1)")
    p.add_argument("--steps", type=int, default=Recipe.steps)
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = p.parse_args(argv)
    nanogpt = load_nanogpt(args.nanogpt)  # before any run: a wrong dir fails at once
    r = Recipe(steps=args.steps, warmup=min(Recipe.warmup, args.steps // 10))  # short: 10%
    torch.set_num_threads(1)  # as the normlab run (num_threads=1): the same kernels
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in (int(s) for s in args.seeds.split(",")):
            t0 = time.perf_counter()
            ours, dm = train_normlab(r, seed, Path(tmp))
            t1 = time.perf_counter()
            theirs = train_nanogpt(nanogpt, dm, r, seed)
            t2 = time.perf_counter()
            rows.append({"seed": seed, "normlab": ours, "nanogpt": theirs,
                         "normlab_s": t1 - t0, "nanogpt_s": t2 - t1})  # fmt: skip
            print(f"seed {seed}: val loss normlab {ours:.4f} ({t1 - t0:.0f} s), nanoGPT "
                  f"{theirs:.4f} ({t2 - t1:.0f} s)", flush=True)  # fmt: skip
    diffs = [row["normlab"] - row["nanogpt"] for row in rows]
    paired = mean_interval(diffs).text(4) if len(diffs) > 1 else f"{diffs[0]:+.4f} (one seed)"
    print(f"normlab - nanoGPT, paired by seed: {paired}")
    result = {"recipe": asdict(r), "runs": rows, "difference": paired, "cpu": cpu_line()}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return result


def cpu_line() -> str:
    """The CPU, its vector flags and the load, for the record."""
    from scripts.bench.cli import cpu_flags, cpu_model

    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    return f"{cpu_model()} ({' '.join(cpu_flags())}), load {load}"


if __name__ == "__main__":
    main(sys.argv[1:])
