"""Probe a pretrained GPT-2 with normlab's stability probes: per-layer profiles on your text.

    python -m scripts.probe_model gpt2 --text notes.txt              # a hub id already cached
    python -m scripts.probe_model path/to/save_pretrained_dir --text notes.txt --out probe/

The checkpoint loads as normlab's Pre-LN GPT (``GPT.from_hf``, models/pretrained.py); the text
is tokenized with the checkpoint's own tokenizer.json (``--tokenizer`` names another, or
``bytes``) and cut into up to ``--windows`` windows of the model's context, evenly spaced. One
no-grad forward pass of them reads, per layer: the residual stream's RMS (act_norm) and largest
|value| (act_max, Sun et al. 2024's massive activations), the cosine between each block's input
and output (block_cos), attention entropy (mean and min over heads, Zhai et al. 2023) and the
largest attention logit; and the output logits' mean log Z (Wortsman et al. 2023). Writes
profile.json and profile.png (2 x 2 panels) into ``--out`` (default: probe-<model name>/).
"""

from __future__ import annotations

import sys  # noqa: I001
from pathlib import Path

# This checkout's packages, never an installed copy of another (python scripts/x.py puts
# scripts/ first on sys.path, not the checkout).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import re

import torch

from models.gpt import GPT
from models.pretrained import checkpoint_dir

PER_LAYER = ("act_norm", "act_max", "block_cos", "attn/entropy", "attn/entropy_min")


def load_tokenizer(name: str | None, directory: Path):
    from data.tokenizer import load_fixed

    if name is None:
        if not (directory / "tokenizer.json").is_file():
            raise FileNotFoundError(
                f"{directory} has no tokenizer.json; pass --tokenizer <tokenizer.json> or bytes"
            )
        name = str(directory / "tokenizer.json")
    return load_fixed(name)


def windows(ids: torch.Tensor, size: int, count: int) -> torch.Tensor:
    """Up to ``count`` windows of ``size`` tokens, evenly spaced over ``ids``: (N, size)."""
    if len(ids) < size:
        raise ValueError(
            f"the text gives {len(ids)} tokens, fewer than one window of {size}; pass a longer "
            "--text file"
        )
    starts = torch.linspace(0, len(ids) - size, min(count, len(ids) - size + 1)).round().long()
    return torch.stack([ids[s : s + size] for s in starts.tolist()])


def profile(model: GPT, batch: torch.Tensor) -> dict:
    """Per-layer lists of every PER_LAYER measure, the max attention logit per layer, log Z and
    the next-token loss of ``batch``."""
    from training.probes.attention import AttnEntropy, MaxAttnLogit
    from training.probes.forward import run_forward_probes
    from training.probes.measures import ActMax, ActNorm, BlockCos, LogZ

    measures = [ActNorm(), ActMax(), BlockCos(), AttnEntropy(), MaxAttnLogit(), LogZ()]
    flat = run_forward_probes(model, batch, measures, step=0)
    out: dict = {"layers": len(model.blocks)}
    for name in (*PER_LAYER, "attn/max_logit"):
        out[name] = [flat[f"{name}/layer_{i}"] for i in range(len(model.blocks))]
    out["log_z"] = flat["logits/log_z"]
    with torch.no_grad():
        _, loss = model.eval()(batch[:, :-1], batch[:, 1:])
    out["loss"] = float(loss)
    return out


def plot(result: dict, title: str, path: Path) -> None:
    from analysis.xy import plt

    layers = list(range(result["layers"]))
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    panels = (
        (axes[0, 0], ("act_max", "act_norm"), "residual stream: max |h| and RMS", True),
        (axes[0, 1], ("attn/entropy", "attn/entropy_min"), "attention entropy (nats)", False),
        (axes[1, 0], ("block_cos",), "cosine(block input, output)", False),
        (axes[1, 1], ("attn/max_logit",), "largest attention logit", False),
    )
    for ax, names, label, log in panels:
        for name in names:
            ax.plot(layers, result[name], "o-", ms=3, label=name)
        ax.set_xlabel("layer")
        ax.set_ylabel(label)
        ax.set_yscale("log" if log else "linear")
        if not log:
            ax.ticklabel_format(axis="y", useOffset=False)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=8, frameon=False)
    fig.suptitle(f"{title}: mean log Z {result['log_z']:.2f}, loss {result['loss']:.3f} nats/token")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def probe_main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="a save_pretrained directory or a cached hub id (gpt2)")
    p.add_argument("--text", type=Path, required=True, help="a UTF-8 text file")
    p.add_argument("--tokenizer", default=None, help="default: the checkpoint's tokenizer.json")
    p.add_argument("--windows", type=int, default=8, help="context windows to probe (default 8)")
    p.add_argument("--out", type=Path, default=None, help="default: probe-<model>/")
    args = p.parse_args(argv)
    if args.windows < 1:
        raise ValueError(f"--windows {args.windows} must be >= 1; e.g. --windows 8")
    if not args.text.is_file():
        raise FileNotFoundError(f"--text {args.text} does not exist; pass a text file")
    if not args.text.read_text(errors="replace").strip():
        raise ValueError(f"--text {args.text} is empty; pass a file with text to probe on")
    directory = checkpoint_dir(args.model)
    model = GPT.from_hf(str(directory))
    tokenizer = load_tokenizer(args.tokenizer, directory)
    ids = tokenizer.encode(args.text.read_text(errors="replace")).long()
    if int(ids.max()) >= model.cfg.vocab_size:
        raise ValueError(
            f"the tokenizer gives id {int(ids.max())}, beyond the model's {model.cfg.vocab_size}"
        )
    result = profile(model, windows(ids, model.cfg.block_size, args.windows))
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(args.model).name or str(args.model))
    out = args.out or Path(f"probe-{name}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "profile.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(result, name, out / "profile.png")
    print(f"{name}: {result['layers']} layers, loss {result['loss']:.3f}, wrote {out}/profile.*")
    return result


def main(argv: list[str] | None = None) -> dict:
    """Bad input is one ``error:`` line and exit code 1, as in train.py."""
    from training.errors import script_errors

    return script_errors(probe_main)(argv)


if __name__ == "__main__":
    main()
