"""Image sources, decoded once into uint8 arrays: in memory (digits) or in the data cache.

Sources (``data.source``):
  digits        scikit-learn's bundled 8x8 digits (1,797 images, 10 classes, values 0..16)
  hf_image      a Hugging Face hub dataset id with an image column and an integer label column
  image_folder  a local folder read by datasets' ``imagefolder`` builder (one subfolder per class,
                optionally under train/ and test/), or a folder written by ``save_to_disk``

Hub and folder images are decoded, converted to one mode (L or RGB) and resized once, into
``<cache_dir>/images/<name>-<fingerprint>/{split}_x.bin`` (N, C, H, W) uint8 memory-mapped
arrays with int64 labels (data/cache.py: built atomically, rebuilt when untrustworthy).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from data.cache import ArrayWriter, Entry, cache_root, entry_dir, prepared, progress
from data.hub import load_hub_dataset

SOURCES = ("digits", "hf_image", "image_folder")
VAL_NAMES = ("test", "validation", "valid", "val")  # val_split=auto picks the first present


def load_digits() -> tuple[np.ndarray, np.ndarray, int]:
    """(images (N, 1, 8, 8) uint8 in 0..16, labels (N,), num_classes)."""
    from sklearn.datasets import load_digits as sk_digits

    x, y = sk_digits(return_X_y=True)
    return x.astype(np.uint8).reshape(-1, 1, 8, 8), y.astype(np.int64), 10


# ---------------------------------------------------------------- fingerprints


def _folder_key(path: Path) -> dict:
    """Every file's path relative to ``path`` (so its class), size and mtime, as one digest:
    it changes when an image is added, edited, removed or moved to another class folder."""
    listing = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            st = os.stat(full)
            listing.append((os.path.relpath(full, path), st.st_size, st.st_mtime_ns))
    digest = hashlib.sha256(json.dumps(listing).encode()).hexdigest()
    return {"path": str(path.resolve()), "files": len(listing), "listing_sha256": digest}


def source_key(cfg: Any) -> dict:
    if cfg.source == "image_folder":
        return {"source": "image_folder", **_folder_key(folder(cfg))}
    if not cfg.hf_id:
        raise ValueError("data.source=hf_image needs data.hf_id=<hub dataset id>")
    return {
        "source": "hf_image",
        "hf_id": cfg.hf_id,
        "hf_config": cfg.hf_config,
        "revision": cfg.hf_revision or "main",
        "splits": [cfg.train_split, cfg.val_split],
    }


def folder(cfg: Any) -> Path:
    if not cfg.path:
        raise ValueError("data=image_folder needs data.path=<folder with one subfolder per class>")
    path = Path(cfg.path).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"data.path={cfg.path} is not a directory; fix data.path")
    return path


# ---------------------------------------------------------------- loading the splits


def _folder_splits(cfg: Any, work: Path) -> dict:
    import datasets

    path = folder(cfg)
    if (path / "dataset_dict.json").exists() or (path / "state.json").exists():
        loaded = datasets.load_from_disk(str(path))
    else:
        try:
            loaded = datasets.load_dataset("imagefolder", data_dir=str(path), cache_dir=str(work))
        except (datasets.data_files.EmptyDatasetError, FileNotFoundError) as err:
            raise ValueError(
                f"data.path={cfg.path} holds no images; put them in one subfolder per class "
                f"(e.g. {cfg.path}/cat/1.png)"
            ) from err
    return dict(loaded) if isinstance(loaded, datasets.DatasetDict) else {"train": loaded}


def _splits(cfg: Any, work: Path) -> dict:
    """{"train": Dataset, "val": Dataset or absent (carve val_fraction off train)}."""
    if cfg.source == "image_folder":
        found = _folder_splits(cfg, work)
        where = f"data.path={cfg.path}"
    else:
        fallback = "use data=digits or data=image_folder"
        names = [cfg.train_split] + ([cfg.val_split] if cfg.val_split not in (None, "auto") else [])
        found = {n: load_hub_dataset(cfg.hf_id, cfg.hf_config, n, fallback) for n in names}
        where = cfg.hf_id
    if cfg.train_split not in found:
        raise ValueError(f"{where} has no split {cfg.train_split!r}; set data.train_split")
    _check_columns(found[cfg.train_split], cfg)
    val = cfg.val_split
    if val == "auto":
        val = next((n for n in VAL_NAMES if n in found), None)
    if val is not None and val not in found:
        raise ValueError(f"{where} has no split {val!r}; set data.val_split (null: carve)")
    return {"train": found[cfg.train_split], **({"val": found[val]} if val else {})}


def _check_columns(ds, cfg: Any) -> None:
    where = f"data.path={cfg.path}" if cfg.source == "image_folder" else cfg.hf_id
    if cfg.source == "image_folder" and cfg.label_column not in ds.column_names:
        raise ValueError(
            f"{where} has images of a single class; a classifier needs one subfolder per class "
            "and at least two of them"
        )
    missing = [c for c in (cfg.image_column, cfg.label_column) if c not in ds.column_names]
    if missing:
        raise ValueError(
            f"{where} has no column {missing[0]!r}; set data.image_column / "
            f"data.label_column from {ds.column_names}"
        )


def _num_classes(ds, cfg: Any) -> int:
    feature = ds.features[cfg.label_column]
    # A ClassLabel feature knows its class count even if a split misses some classes.
    n = getattr(feature, "num_classes", None) or int(max(ds[cfg.label_column])) + 1
    if n < 2:
        raise ValueError(f"{cfg.path or cfg.hf_id} has a single class; a classifier needs two")
    return n


def _decode(ds, cfg: Any, tmp: Path, split: str, mode: str) -> dict:
    """Decode, convert and resize every image of ``ds`` into (N, C, H, W) uint8 + labels."""
    images, shape = None, None
    rows = ds.select_columns([cfg.image_column])
    for row in progress(rows, len(ds), f"decoding {split} images"):
        pic = row[cfg.image_column].convert(mode)
        if cfg.image_size is not None:
            pic = pic.resize((cfg.image_size, cfg.image_size))
        array = np.asarray(pic)
        array = array[None] if array.ndim == 2 else array.transpose(2, 0, 1)  # (C, H, W)
        if images is None:
            shape = array.shape
            images = ArrayWriter(tmp, f"{split}_x", np.uint8, shape)
        if array.shape != shape or shape[1] != shape[2]:
            where = cfg.hf_id or cfg.path
            raise ValueError(f"{where} images are not all square and equal; set data.image_size")
        images.write(array[None])
    labels = ArrayWriter(tmp, f"{split}_y", np.int64)
    labels.write(np.asarray(ds[cfg.label_column], dtype=np.int64))
    images.close()
    labels.close()
    return {f"{split}_x": images.spec(), f"{split}_y": labels.spec()}


GRAY = ("L", "1")  # PIL modes stored as one channel; every other mode is converted to RGB


def image_mode(splits: dict, cfg: Any, log=print) -> str:
    """One mode for the whole set, read from every image's header (no decoding): L when all
    are grayscale, else RGB, the grayscale ones converted (nothing is lost) and counted."""
    import datasets
    from PIL import Image

    modes: dict[str, int] = {}
    for ds in splits.values():
        raw = ds.select_columns([cfg.image_column])
        raw = raw.cast_column(cfg.image_column, datasets.Image(decode=False))
        for row in raw:
            cell = row[cfg.image_column]
            source = io.BytesIO(cell["bytes"]) if cell.get("bytes") else cell["path"]
            with Image.open(source) as pic:
                modes[pic.mode] = modes.get(pic.mode, 0) + 1
    gray = sum(n for m, n in modes.items() if m in GRAY)
    if gray and gray < sum(modes.values()):
        where = cfg.hf_id or cfg.path
        log(f"{where}: {gray} grayscale images among colour ones; converting them to RGB")
    return "L" if gray == sum(modes.values()) else "RGB"


def prepare_images(cfg: Any, log=print) -> Entry:
    """The cache entry of the decoded images: arrays train_x, train_y (and val_x, val_y)."""
    fp = {"source": source_key(cfg), "image_size": cfg.image_size, "val_split": cfg.val_split}
    fp["columns"] = [cfg.image_column, cfg.label_column, cfg.train_split]
    name = cfg.hf_id or Path(cfg.path).name
    path = entry_dir(cache_root(cfg.cache_dir), "images", name, fp)

    def build(tmp: Path) -> dict:
        splits = _splits(cfg, tmp / "work")
        if "val" in splits:
            _check_columns(splits["val"], cfg)
        train = splits["train"]
        if len(train) == 0:
            raise ValueError(f"{cfg.hf_id or cfg.path} has no train images; check data.path")
        mode = image_mode(splits, cfg, log)
        arrays = {}
        for split, ds in splits.items():
            arrays.update(_decode(ds, cfg, tmp, split, mode))
        names = getattr(train.features[cfg.label_column], "names", None)
        shutil.rmtree(tmp / "work", ignore_errors=True)
        return {"arrays": arrays, "num_classes": _num_classes(train, cfg), "classes": names}

    return prepared(path, fp, build, log)
