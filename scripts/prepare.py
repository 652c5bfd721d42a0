"""Prepare a data config's cache ahead of a sweep, so that no job of the sweep waits for it.

    python -m scripts.prepare                                    # pydocs, char level
    python -m scripts.prepare data=hf_text data.vocab_size=50257 # TinyStories, BPE
    python -m scripts.prepare data=text_files data.paths=[corpus.txt] data.tokenizer=bpe
    python -m scripts.prepare data=image_folder data.path=/data/cifar10

The overrides are train.py's (the same config tree), so a sweep's jobs later find exactly the
entry prepared here. Prints the entry's directory and its size; a bad setting exits with one line.
"""

from __future__ import annotations

import sys  # noqa: I001
from pathlib import Path

# This checkout's packages, never an installed copy of another (python scripts/x.py puts
# scripts/ first on sys.path, not the checkout).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import time
from dataclasses import fields

from omegaconf import OmegaConf

from data.config import ImageDataConfig, TextDataConfig
from data.images import prepare_images
from data.text import check_text_config
from data.tokens import prepare_text

CONF = Path(__file__).resolve().parents[1] / "conf"
CONFIGS = {"text": TextDataConfig, "image": ImageDataConfig}


def data_config(overrides: list[str]) -> TextDataConfig | ImageDataConfig:
    """The composed ``data`` node as its dataclass (kind and batch_size belong to the run)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    node = OmegaConf.to_container(cfg.data, resolve=True)
    cls = CONFIGS[node.pop("kind")]
    node.pop("batch_size", None)
    unknown = sorted(set(node) - {f.name for f in fields(cls)})
    if unknown:
        raise ValueError(f"data.{unknown[0]} is not a setting of {cls.__name__}")
    return cls(**node)


def describe(path: Path, seconds: float) -> str:
    size = sum(p.stat().st_size for p in path.iterdir() if p.is_file())
    return f"{path}  {size / 2**20:.1f} MB  ({seconds:.1f} s)"


def prepare(overrides: list[str]) -> Path:
    cfg = data_config(overrides)
    start = time.perf_counter()
    if isinstance(cfg, TextDataConfig):
        check_text_config(cfg)
        entry, tokenizer = prepare_text(cfg)
        for split, stats in entry.meta["splits"].items():
            print(f"{split}: {stats['tokens']:,} tokens", flush=True)
        print(f"vocab: {tokenizer.vocab_size:,} ids ({cfg.tokenizer})")
    elif cfg.source == "digits":
        print("data=digits ships with scikit-learn: nothing to prepare")
        return Path()
    else:
        entry = prepare_images(cfg)
        print(f"train: {entry.meta['arrays']['train_x']['shape']} uint8 images")
    print(describe(entry.path, time.perf_counter() - start))
    return entry.path


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    from hydra.errors import HydraException

    try:
        prepare(argv)
    except (ValueError, OSError, HydraException) as err:
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)  # Hydra's span lines
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
