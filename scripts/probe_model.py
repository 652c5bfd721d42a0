"""Probe a pretrained GPT-2 with normlab's stability probes: per-layer profiles on your text.

    python -m scripts.probe_model gpt2 --text notes.txt              # a hub id already cached
    python -m scripts.probe_model path/to/save_pretrained_dir --text notes.txt --out probe/

The checkpoint loads as normlab's Pre-LN GPT (``GPT.from_hf``, models/pretrained.py); the text
is tokenized with the checkpoint's own tokenizer.json (``--tokenizer`` names another, or
``bytes``) and cut into up to ``--windows`` windows of the model's context, evenly spaced. One
no-grad forward pass of them reads, per layer: the residual stream's RMS (act_norm) and largest
|value| (act_max, Sun et al. 2024's massive activations), the cosine between each block's input
and output (block_cos), attention entropy (mean and min over heads, Zhai et al. 2023) and the
largest attention logit; and the output logits' mean log Z (Wortsman et al. 2023). The
instruments too: the share of attention-sink heads and the first token's attention (Gu et al.
2025), the massive-activation ratio with its channel (Sun et al. 2024), the neurons' kurtosis
(He et al. 2024), each linear layer's output RMS, the loss without each layer (Sun et al. 2025)
and the fp16 / bf16 headroom. Writes profile.json and profile.png (2 x 4 panels) into ``--out``
(default: probe-<model name>/).
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
PER_LAYER += ("attn/sink", "attn/first_token", "act_massive", "act_massive/channel")
PER_LAYER += ("act_kurtosis", "layer_drop")
PER_LAYER += tuple(f"linear_out/{n}" for n in ("q", "k", "v", "proj", "fc1", "fc2"))
WHOLE = ("attn/sink", "headroom/absmax", "headroom/fp16", "headroom/bf16", "logits/log_z")


def pretrained_tokenizer(name: str | None, directory: Path):
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
    from training.probes.forward import run_forward_probes
    from training.probes.registry import MEASURES
    from training.probes.weights import layer_drop

    names = ("ActNorm", "ActMax", "BlockCos", "AttnEntropy", "MaxAttnLogit", "LogZ", "AttnSink")
    names += ("MassiveActivations", "OutlierKurtosis", "LinearOutputs", "Headroom")
    flat = run_forward_probes(model, batch, [MEASURES[n]() for n in names], step=0)
    flat |= {k: float(v) for k, v in layer_drop(model, batch[:, :-1], batch[:, 1:]).items()}
    out: dict = {"layers": len(model.blocks)}
    for name in (*PER_LAYER, "attn/max_logit"):
        out[name] = [flat[f"{name}/layer_{i}"] for i in range(len(model.blocks))]
    out |= {name.replace("logits/", "").replace("/", "_"): flat[name] for name in WHOLE}
    with torch.no_grad():
        _, loss = model.eval()(batch[:, :-1], batch[:, 1:])
    out["loss"] = float(loss)
    return out


def plot(result: dict, title: str, path: Path) -> None:
    from analysis.xy import plt

    layers = list(range(result["layers"]))
    fig, axes = plt.subplots(2, 4, figsize=(19, 7))
    linears = tuple(f"linear_out/{n}" for n in ("q", "k", "v", "proj", "fc1", "fc2"))
    panels = (
        (axes[0, 0], ("act_max", "act_norm"), "residual stream: max |h| and RMS", True),
        (axes[0, 1], ("attn/entropy", "attn/entropy_min"), "attention entropy (nats)", False),
        (axes[0, 2], ("block_cos",), "cosine(block input, output)", False),
        (axes[0, 3], ("attn/max_logit",), "largest attention logit", False),
        (axes[1, 0], ("act_massive", "act_kurtosis"), "max|h| / median|h|; kurtosis", True),
        (axes[1, 1], ("attn/sink", "attn/first_token"), "sink heads; first-token attention", False),
        (axes[1, 2], ("layer_drop",), "loss without the layer - loss (nats)", False),
        (axes[1, 3], linears, "linear outputs' RMS", True),
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
    fig.suptitle(
        f"{title}: mean log Z {result['log_z']:.2f}, loss {result['loss']:.3f} nats/token, "
        f"fp16 headroom {result['headroom_fp16']:.1f} doublings"
    )
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
    tokenizer = pretrained_tokenizer(args.tokenizer, directory)
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
