"""What each block of a trained run does to the residual stream (F9, Sun et al. 2025).

For block i with input x (the stream before it) and output h, over the positions of the run's
first validation batch, with the final weights (last.ckpt):

    cos_i = mean over positions of cos(x, h)    near 1: the block barely changes its input
    rms_i = sqrt(mean(h^2))                      the stream's scale after block i

The measurement runs once per run dir and is kept in <run_dir>/block_profile.json; the F9
claims read it from there. (The training-time probe of the same cosine, block_cos/layer_{i},
logs it during training on the probe batch; this reads the finished model, so a sweep run
without that probe still has it.)
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

PROFILE = "block_profile.json"


@torch.no_grad()
def profile_blocks(model: nn.Module, inputs: torch.Tensor) -> dict[str, list[float]]:
    """Per block of ``model.blocks``: the mean input/output cosine and the output RMS."""
    cos: list[float] = []
    rms: list[float] = []

    def hook(module: nn.Module, args: tuple, out: torch.Tensor) -> None:
        x, h = args[0].double(), out.double()
        cos.append(F.cosine_similarity(x, h, dim=-1).mean().item())
        rms.append(h.square().mean().sqrt().item())

    handles = [b.register_forward_hook(hook) for b in model.blocks]
    training = model.training
    try:
        model.eval()
        model(inputs)
    finally:
        for handle in handles:
            handle.remove()
        model.train(training)
    return {"cos": cos, "rms": rms}


def measure_run(run_dir: Path) -> dict[str, list[float]]:
    """Rebuild the run's data and final model from its dir and profile its blocks."""
    from omegaconf import OmegaConf

    from training.build import build_data, model_spec

    cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    spec = model_spec(cfg)
    dm = build_data(cfg, spec)
    task = spec.task.load_from_checkpoint(run_dir / "last.ckpt", map_location="cpu")
    inputs = next(iter(dm.val_dataloader()))[0]
    return profile_blocks(task.model, inputs)


def block_profile(run_dir: str | Path) -> dict[str, list[float]] | None:
    """The run's block profile: read from block_profile.json, else measured and written there;
    None when the run has no final checkpoint (it diverged, failed or is still running)."""
    run_dir = Path(run_dir)
    path = run_dir / PROFILE
    if path.is_file():
        return json.loads(path.read_text())
    if not (run_dir / "last.ckpt").is_file():
        return None
    profile = measure_run(run_dir)
    path.write_text(json.dumps(profile) + "\n")
    return profile


def plot_profiles(sweep_dir: Path) -> Path:
    """report/block_profile.png of a reported sweep: per variant, the mean over its completed
    runs of each block's 1 - cosine (log scale: how much it changes its input) and output RMS
    against the block's depth."""
    import matplotlib

    matplotlib.use("Agg")  # files only
    import matplotlib.pyplot as plt

    report = json.loads((sweep_dir / "report" / "report.json").read_text())
    fig, (ax_cos, ax_rms) = plt.subplots(1, 2, figsize=(10, 4))
    for row in report["variants"]:
        runs = [r for r in row["runs"] if r["status"] == "completed"]
        found = [p for p in (block_profile(r["run_dir"]) for r in runs) if p]
        if not found:
            continue
        layers = range(1, len(found[0]["cos"]) + 1)
        label = f"{row['label']} (n={len(found)})"
        cos = [sum(p["cos"][i] for p in found) / len(found) for i in range(len(layers))]
        rms = [sum(p["rms"][i] for p in found) / len(found) for i in range(len(layers))]
        ax_cos.plot(layers, [1 - c for c in cos], marker=".", label=label)
        ax_rms.plot(layers, rms, marker=".", label=label)
    ax_cos.set_yscale("log")
    ax_cos.set(xlabel="block l", ylabel="1 - mean cos(input, output)", title="what block l changes")
    ax_rms.set(xlabel="block l", ylabel="RMS of the stream after block l", title="stream scale")
    ax_cos.legend(fontsize=7)
    fig.tight_layout()
    path = sweep_dir / "report" / "block_profile.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


if __name__ == "__main__":  # python -m scripts.analysis.block_profile SWEEP_DIR
    import sys

    print(plot_profiles(Path(sys.argv[1])))
