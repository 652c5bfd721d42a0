"""Generate text from a trained GPT run: the checkpoint describes its model, vocab.json its chars.

    python -m scripts.sample outputs/2026-12-01/12-00-00 --prompt "The class" --tokens 200
    python -m scripts.sample <run_dir> --temperature 0.8 --top-k 20 --seed 1

Sampling is autoregressive over the model's context (the last block_size tokens), with the
logits divided by the temperature and, with --top-k, all but the k largest set to -inf. The same
seed gives the same text.
"""

from __future__ import annotations

import sys  # noqa: I001
from pathlib import Path

# This checkout's packages, never an installed copy of another (python scripts/x.py puts
# scripts/ first on sys.path, not the checkout).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse

import torch

from data.tokenizer import load_vocab
from models.gpt import GPT
from runs import runfiles


@torch.no_grad()
def generate(
    model: GPT,
    idx: torch.Tensor,
    tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``idx`` (B, T) followed by ``tokens`` sampled tokens: (B, T + tokens)."""
    model.eval()
    for _ in range(tokens):
        context = idx[:, -model.cfg.block_size :]  # (B, <=block_size)
        logits, _ = model(context)
        logits = logits[:, -1, :] / max(temperature, 1e-8)  # (B, V)
        if top_k is not None:
            kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]  # (B, 1)
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        nxt = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
        idx = torch.cat([idx, nxt], dim=1)
    return idx


def load_model(run_dir: Path) -> GPT:
    """The GPT of a run dir's last.ckpt, rebuilt from the config the checkpoint holds."""
    from runs.errors import ConfigError
    from training.reliability.checkpoints import model_of, read_checkpoint

    path = run_dir / runfiles.CHECKPOINT
    if not path.is_file():
        raise ConfigError(f"{path} does not exist; pass a finished GPT run's directory")
    model = model_of(read_checkpoint(path, "pass a run dir whose last.ckpt is whole"))
    if not isinstance(model, GPT):
        raise ConfigError(f"{path} holds a ViT; sample needs a GPT run's directory")
    return model


def main(argv: list[str] | None = None) -> str:
    """Bad input is one ``error:`` line and exit code 1, as in train.py."""
    from training.errors import script_errors

    return script_errors(sample_main)(argv)


def sample_main(argv: list[str] | None = None) -> str:
    from runs.errors import ConfigError

    p = argparse.ArgumentParser(
        prog="python -m scripts.sample",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run_dir", type=Path, help="a GPT run's directory (last.ckpt, vocab.json)")
    p.add_argument("--prompt", default="\n", help="the text to continue (default: a newline)")
    p.add_argument("--tokens", type=int, default=200, help="tokens to sample (default 200)")
    p.add_argument(
        "--temperature", type=float, default=1.0, help="divides the logits (default 1.0)"
    )
    p.add_argument(
        "--top-k", type=int, default=None, help="sample among the k likeliest tokens only"
    )
    p.add_argument("--seed", type=int, default=0, help="the same seed gives the same text")
    args = p.parse_args(argv)
    if args.tokens < 0 or args.temperature <= 0 or (args.top_k is not None and args.top_k < 1):
        p.error("--tokens must be >= 0, --temperature > 0 and --top-k >= 1")
    vocab_path = args.run_dir / runfiles.VOCAB
    if not vocab_path.is_file():
        raise ConfigError(f"{vocab_path} does not exist; sample needs a GPT run's dir")
    try:
        vocab = load_vocab(vocab_path)
    except (ValueError, KeyError) as err:
        raise ValueError(f"{vocab_path} is not a vocabulary train.py wrote ({err})") from err
    model = load_model(args.run_dir)
    prompt = vocab.encode(args.prompt or "\n")[None, :]  # (1, T)
    out = generate(
        model,
        prompt,
        args.tokens,
        args.temperature,
        args.top_k,
        torch.Generator().manual_seed(args.seed),
    )
    text = vocab.decode(out[0])
    print(text)
    return text


if __name__ == "__main__":
    main()
