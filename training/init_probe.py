"""F1 at initialization (Xiong et al. 2020, Thm 1 and Lemma 2), without any training.

For every placement x depth x seed the model is built at init (Admin's omegas profiled on the
first batch, as a fresh training run sets them) and one forward + backward of the training loss
runs on each of K batches. Per layer i it records

    grad_norm/layer  L2 norm of all gradients of blocks[i] (attention, MLP, norm slots)
    grad_norm/attn   of blocks[i].attn
    grad_norm/mlp    of blocks[i].mlp
    grad_norm/fc2    of blocks[i].mlp.fc2.weight
    act_norm         RMS of the residual stream after blocks[i]

and reports the mean and the sample std over the seeds x K samples, and each seed's own mean
over its K batches of the last FFN gradient and of act_norm's last/first ratio (``per_seed``, so
the verdicts can put an interval over seeds on them); ``last_fc2_grad_norm`` is
grad_norm/fc2 of the last layer. Xiong's prediction: last_fc2 stays flat across depth L for
Post-LN and falls like 1/sqrt(L) for Pre-LN (``depth_slopes`` fits log last_fc2 against log L:
about 0 and -0.5); act_norm is flat across layers for Post-LN and grows with the layer for Pre-LN.

    python -m scripts.init_probe init_probe.depths=[6,12,24,48]    # on the configured data
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

import torch
from torch import nn

from models.gpt import GPTConfig
from models.vit import ViTConfig
from runs.numbers import log_slope
from training.specs import spec_of

Batch = tuple[torch.Tensor, torch.Tensor]
PER_LAYER = ("grad_norm/layer", "grad_norm/attn", "grad_norm/mlp", "grad_norm/fc2", "act_norm")


def grads_norm(params: Sequence[nn.Parameter]) -> float:
    grads = [p.grad.flatten() for p in params if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.cat(grads))) if grads else 0.0


def measure_at_init(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> dict:
    """Per-layer gradient and residual-stream norms after one forward + backward."""
    rms: list[float] = []
    handles = [
        block.register_forward_hook(
            lambda m, i, out: rms.append(float(out.detach().square().mean().sqrt()))
        )
        for block in model.blocks
    ]
    model.eval()  # no dropout: the init-time function itself
    model.zero_grad(set_to_none=True)
    try:
        _, loss = model(inputs, targets)
    finally:
        for handle in handles:
            handle.remove()
    loss.backward()
    blocks = model.blocks
    return {
        "loss": [float(loss.detach())],
        "grad_norm/layer": [grads_norm(list(b.parameters())) for b in blocks],
        "grad_norm/attn": [grads_norm(list(b.attn.parameters())) for b in blocks],
        "grad_norm/mlp": [grads_norm(list(b.mlp.parameters())) for b in blocks],
        "grad_norm/fc2": [grads_norm([b.mlp.fc2.weight]) for b in blocks],
        "act_norm": rms,
    }


def mean_std(samples: list[list[float]]) -> dict[str, list[float]]:
    """Mean and sample std (n - 1; 0 for one sample) over samples, per entry."""
    t = torch.tensor(samples, dtype=torch.float64)  # (n, entries)
    std = t.std(dim=0, correction=1) if len(samples) > 1 else torch.zeros(t.shape[1])
    return {"mean": t.mean(dim=0).tolist(), "std": std.tolist()}


def init_probe(
    base: GPTConfig | ViTConfig,
    batches: Batch | Sequence[Batch],
    placements: Sequence[str] = ("post", "pre", "deepnorm"),
    depths: Sequence[int] = (2, 6, 12, 24, 48),
    seeds: Sequence[int] = (0, 1, 2),
) -> dict:
    """F1's quantities at init for ``base`` with each placement and depth (n_layer) swapped in.

    ``batches``: one (inputs, targets) pair or K of them; each seed's model sees all K. Runs on
    the CPU with one thread (restored after): these small ops only lose time to threading.
    """
    if isinstance(batches, tuple) and isinstance(batches[0], torch.Tensor):
        batches = [batches]
    if not batches or not placements or not depths or not seeds:
        raise ValueError("init_probe needs at least one batch, placement, depth and seed")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs, slopes = sweep(base, batches, placements, depths, seeds)
    finally:
        torch.set_num_threads(threads)
    config = {k: v for k, v in asdict(base).items() if k not in ("placement", "n_layer")}
    return {
        "finding": "F1",
        "model": "gpt" if isinstance(base, GPTConfig) else "vit",
        "config": config,
        "placements": list(placements),
        "depths": list(depths),
        "seeds": list(seeds),
        "k_batches": len(batches),
        "batch_shape": list(batches[0][0].shape),
        "depth_slopes": slopes,
        "runs": runs,
    }


def sweep(
    base: GPTConfig | ViTConfig,
    batches: Sequence[Batch],
    placements: Sequence[str],
    depths: Sequence[int],
    seeds: Sequence[int],
) -> tuple[list[dict], dict[str, float | None]]:
    runs, slopes = [], {}
    for placement in placements:
        last_fc2_means = []
        for n_layer in depths:
            cfg = replace(base, placement=replace(base.placement, name=placement), n_layer=n_layer)
            samples: list[dict] = []
            per_seed: dict[str, list[float]] = {"last_fc2": [], "act_ratio": []}
            for seed in seeds:
                torch.manual_seed(seed)
                model = spec_of(cfg).module(cfg)
                model.profile_init(batches[0][0])  # Admin's omegas, as training sets them
                mine = [measure_at_init(model, x, y) for x, y in batches]
                samples += mine
                act = mean_std([s["act_norm"] for s in mine])["mean"]
                per_seed["last_fc2"].append(
                    mean_std([s["grad_norm/fc2"][-1:] for s in mine])["mean"][0]
                )
                per_seed["act_ratio"].append(act[-1] / act[0])
            run = {"placement": placement, "n_layer": n_layer, "n_samples": len(samples)}
            # each seed's mean over the K batches (seed intervals), and the seeds themselves
            run["per_seed"] = {**per_seed, "seed": [float(x) for x in seeds]}
            for key in ("loss", *PER_LAYER):
                run[key] = mean_std([s[key] for s in samples])
            run["loss"] = {k: v[0] for k, v in run["loss"].items()}
            fc2 = mean_std([s["grad_norm/fc2"][-1:] for s in samples])
            run["last_fc2_grad_norm"] = {k: v[0] for k, v in fc2.items()}
            last_fc2_means.append(run["last_fc2_grad_norm"]["mean"])
            runs.append(run)
        slopes[placement] = log_slope(list(depths), last_fc2_means)
    return runs, slopes


def write_probe_json(result: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def random_batches(cfg: GPTConfig | ViTConfig, k: int, batch_size: int, seed: int) -> list[Batch]:
    """K random batches for the model ``cfg`` describes (its spec's ``random_batch``)."""
    g = torch.Generator().manual_seed(seed)
    return [spec_of(cfg).random_batch(cfg, batch_size, g) for _ in range(k)]


def format_table(result: dict) -> str:
    lines = [f"{'placement':<10} {'L':>4} {'last_fc2 grad':>22} {'act_norm first->last':>22}"]
    for run in result["runs"]:
        fc2, act = run["last_fc2_grad_norm"], run["act_norm"]["mean"]
        lines.append(
            f"{run['placement']:<10} {run['n_layer']:>4} "
            f"{fc2['mean']:>12.4g} +- {fc2['std']:<7.2g} {act[0]:>10.3g} -> {act[-1]:<9.3g}"
        )
    for placement, slope in result["depth_slopes"].items():
        text = "n/a" if slope is None or math.isnan(slope) else f"{slope:+.3f}"
        lines.append(f"d log(last_fc2) / d log(L), {placement}: {text}")
    return "\n".join(lines)
