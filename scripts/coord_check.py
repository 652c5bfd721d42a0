"""Coordinate check: how each layer's activations and their change after a few Adam steps scale
with width (or depth) under each parametrization (models/param.py).

    python -m scripts.coord_check                                   # SP vs muP, widths 32-512
    python -m scripts.coord_check --axis depth --params sp completep --depths 2 4 8 16 32
    python -m scripts.coord_check --placement post --widths 32 64 128 --out coord-post

For every parametrization and size, ``--seeds`` models are trained ``--steps`` AdamW steps on
one fixed batch of random tokens (the lr as given; no warmup, no decay), and at each step the
mean absolute coordinate of every site is recorded on that batch: the token embedding, each
Block's attention branch, MLP branch and output, the residual stream after the last Block
("stream") and the logits, with the mean absolute change of each from step 0. As in Yang et al.
2022 (Tensor Programs V, Fig. 5): under SP the change grows with the width, under muP it stays
flat. Across depth (Dey et al. 2025) the sites to read are the stream and the logits: under
CompleteP each Block adds a 1/L share, so a single Block's change falls as 1/L while the stream,
their sum, stays flat.

Writes coord.csv (param, size, seed, step, site, value, change) and coord.png (a row per
parametrization, a column per step, the change of each site against the size on log axes, as
the mup package draws it), and prints each site's log-log slope of the change against the size.
"""

from __future__ import annotations

import sys  # noqa: I001
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import csv
from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class Setup:
    """One coordinate check: the model around the swept size, and how it trains."""

    axis: str  # "width" or "depth"
    width: int  # n_embd when the axis is depth
    depth: int  # n_layer when the axis is width
    base_width: int
    base_depth: int
    placement: str
    norm: str
    lr: float
    steps: int
    batch_size: int
    block_size: int = 32
    vocab_size: int = 64
    n_head: int = 4


def model_for(setup: Setup, param: str, size: int):
    """The GPT at this size under ``param``, base shape from the setup (torch imported here)."""
    from models.config import GPTConfig, ParamConfig

    width = size if setup.axis == "width" else setup.width
    depth = size if setup.axis == "depth" else setup.depth
    p = ParamConfig(name=param, base_width=setup.base_width, base_depth=setup.base_depth)
    from models.gpt import GPT

    return GPT(
        GPTConfig(
            vocab_size=setup.vocab_size, block_size=setup.block_size, n_layer=depth,
            n_embd=width, n_head=setup.n_head, placement=setup.placement, norm=setup.norm,
            param=p,
        )
    )  # fmt: skip


def site_modules(model) -> dict[str, object]:
    """Where coordinates are read: name -> module whose output is the site."""
    sites = {"embedding": model.tok_emb}
    for i, block in enumerate(model.blocks):
        sites[f"block{i}.attn"] = block.attn
        sites[f"block{i}.mlp"] = block.mlp
        sites[f"block{i}"] = block
    sites["stream"] = model.blocks[-1]  # the residual stream after the last block
    sites["logits"] = model.logit_scale
    return sites


def measure(setup: Setup, param: str, size: int, seed: int) -> list[dict]:
    """Rows (step, site, value, change) of one model trained ``setup.steps`` steps."""
    import torch

    from training.optim import build_adamw
    from training.optim_config import OptimConfig

    torch.manual_seed(seed)
    model = model_for(setup, param, size)
    g = torch.Generator().manual_seed(10_000 + seed)
    seq = torch.randint(0, setup.vocab_size, (setup.batch_size, setup.block_size + 1), generator=g)
    inputs, targets = seq[:, :-1], seq[:, 1:]
    opt = build_adamw(model, OptimConfig(lr=setup.lr, weight_decay=0.0, fused=False))
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        module.register_forward_hook(
            lambda m, a, out, name=name: seen.__setitem__(name, out.detach().float())
        )
        for name, module in site_modules(model).items()
    ]
    first: dict[str, torch.Tensor] = {}
    rows = []
    try:
        for step in range(setup.steps + 1):
            model.train()
            _, loss = model(inputs, targets)
            if step == 0:
                first = dict(seen)
            for name, out in seen.items():
                change = (out - first[name]).abs().mean().item()
                rows.append(
                    dict(param=param, size=size, seed=seed, step=step, site=name,
                         value=out.abs().mean().item(), change=change)
                )  # fmt: skip
            if step < setup.steps:
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
    finally:
        for hook in hooks:
            hook.remove()
    return rows


def coord_data(setup: Setup, params: list[str], sizes: list[int], seeds: int) -> list[dict]:
    """Every parametrization x size x seed's rows, with a progress line per model."""
    rows = []
    total, done = len(params) * len(sizes) * seeds, 0
    for param in params:
        for size in sizes:
            for seed in range(seeds):
                rows += measure(setup, param, size, seed)
                done += 1
                print(
                    f"  {done}/{total}: param={param} {setup.axis}={size} seed={seed}", flush=True
                )
    return rows


def mean_change(rows: list[dict]) -> dict[tuple[str, str, int], dict[int, float]]:
    """(param, site, step) -> {size: the change averaged over seeds}."""
    acc: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        acc[(r["param"], r["site"], r["step"], r["size"])].append(r["change"])
    out: dict[tuple, dict[int, float]] = defaultdict(dict)
    for (param, site, step, size), values in acc.items():
        out[(param, site, step)][size] = sum(values) / len(values)
    return out


def slopes(rows: list[dict], step: int) -> dict[tuple[str, str], float]:
    """(param, site) -> least-squares slope of log change against log size at ``step``, for the
    sites every size has (a depth sweep's deeper blocks only exist at the larger depths)."""
    from runs.numbers import log_slope

    out = {}
    for (param, site, s), by_size in mean_change(rows).items():
        if s != step or len(by_size) < 2 or min(by_size.values()) <= 0:
            continue
        sizes = sorted(by_size)
        out[(param, site)] = log_slope(sizes, [by_size[k] for k in sizes])
    return out


def shared_sites(rows: list[dict]) -> list[str]:
    """The sites every model has: the embedding, the stream, the logits and the blocks of the
    smallest."""
    per_size: dict[int, set] = defaultdict(set)
    for r in rows:
        per_size[r["size"]].add(r["site"])
    common = set.intersection(*per_size.values())
    order = {s: i for i, s in enumerate(dict.fromkeys(r["site"] for r in rows))}
    return sorted(common, key=order.__getitem__)


def plot(rows: list[dict], setup: Setup, path: Path) -> None:
    """A row per parametrization, a column per step: each site's change against the size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    params = list(dict.fromkeys(r["param"] for r in rows))
    steps = sorted({r["step"] for r in rows} - {0})
    sites = shared_sites(rows)
    data = mean_change(rows)
    cmap = plt.get_cmap("viridis")
    fig, axes = plt.subplots(
        len(params), len(steps), figsize=(3.2 * len(steps), 2.8 * len(params)), squeeze=False,
        sharey="row",
    )  # fmt: skip
    for i, param in enumerate(params):
        for j, step in enumerate(steps):
            ax = axes[i][j]
            for k, site in enumerate(sites):
                by_size = data[(param, site, step)]
                sizes = sorted(by_size)
                color = {"logits": "black", "stream": "tab:red"}.get(site)
                thick = color is not None or site == "embedding"
                ax.plot(
                    sizes,
                    [by_size[s] for s in sizes],
                    marker="o",
                    ms=3,
                    label=site,
                    color=color or cmap(k / max(1, len(sites) - 1)),
                    lw=2 if thick else 1,
                )
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{param}, step {step}", fontsize=9)
            if i == len(params) - 1:
                ax.set_xlabel(setup.axis)
            if j == 0:
                ax.set_ylabel("mean |x_t - x_0|")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7)
    fixed = f"depth {setup.depth}" if setup.axis == "width" else f"width {setup.width}"
    fig.suptitle(
        f"Coordinate check: {setup.placement}/{setup.norm}, {fixed}, Adam lr {setup.lr:g}; "
        f"base width {setup.base_width}, base depth {setup.base_depth}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def write_csv(rows: list[dict], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--axis", choices=("width", "depth"), default="width")
    ap.add_argument("--params", nargs="+", default=None, help="default: sp mup (width), "
                    "sp completep (depth)")  # fmt: skip
    ap.add_argument("--widths", nargs="+", type=int, default=[32, 64, 128, 256, 512])
    ap.add_argument("--depths", nargs="+", type=int, default=[2, 4, 8, 16, 32])
    ap.add_argument("--width", type=int, default=64, help="n_embd of a depth check")
    ap.add_argument("--depth", type=int, default=2, help="n_layer of a width check")
    ap.add_argument("--base-width", type=int, default=None, help="default: the smallest width")
    ap.add_argument("--base-depth", type=int, default=None, help="default: the smallest depth")
    ap.add_argument("--placement", default="pre")
    ap.add_argument("--norm", default="layernorm")
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--out", type=Path, default=Path("outputs/coord_check"))
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    sizes = args.widths if args.axis == "width" else args.depths
    if len(sizes) < 2 or min(sizes) <= 0 or min(args.steps, args.seeds, args.batch_size) < 1:
        print(
            f"error: give two or more positive --{args.axis}s, --steps >= 1, --seeds >= 1 and "
            "--batch-size >= 1"
        )
        return 2
    if args.out.exists() and not args.out.is_dir():
        print(f"error: --out {args.out} is a file; name a directory for coord.csv and coord.png")
        return 2
    params = args.params or (["sp", "mup"] if args.axis == "width" else ["sp", "completep"])
    setup = Setup(
        axis=args.axis, width=args.width, depth=args.depth,
        base_width=args.base_width or (min(sizes) if args.axis == "width" else args.width),
        base_depth=args.base_depth or (min(sizes) if args.axis == "depth" else args.depth),
        placement=args.placement, norm=args.norm, lr=args.lr, steps=args.steps,
        batch_size=args.batch_size,
    )  # fmt: skip
    try:
        rows = coord_data(setup, params, sizes, args.seeds)
    except ValueError as err:  # a config the model refuses (e.g. a width n_head does not divide)
        print(f"error: {err}")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, args.out / "coord.csv")
    plot(rows, setup, args.out / "coord.png")
    fitted = slopes(rows, args.steps)
    print(f"slope of log change against log {args.axis} at step {args.steps} (0: flat):")
    for site in shared_sites(rows):
        cells = "  ".join(
            f"{p} {fitted[(p, site)]:+.2f}" if (p, site) in fitted else f"{p} n/a" for p in params
        )
        print(f"  {site:<14} {cells}")
    print(f"wrote {args.out / 'coord.csv'} and {args.out / 'coord.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
