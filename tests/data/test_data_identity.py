"""The data a run trains on is what its cache key and its record say: image-folder keys cover each
file's class and identity, one colour mode for the whole set, token files verified against the
checksums recorded at the build, ids checked against the vocabulary on the windows a run reads."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import torch

import data.cache
from data.config import ImageDataConfig, TextDataConfig
from data.text import TextDataModule
from data.vision import ImageDataModule

COLOURS = {"red": (200, 10, 10), "blue": (10, 10, 200)}


def solid(path, rgb, mode="RGB") -> None:
    from PIL import Image

    Image.new("RGB", (8, 8), rgb).convert(mode).save(path)


def colour_folder(root):
    for name, rgb in COLOURS.items():
        (root / name).mkdir(parents=True)
        for i in range(3):
            solid(root / name / f"{name}{i}.png", tuple(max(0, c - 20 * i) for c in rgb))
    return root


def folder_dm(path, cache) -> ImageDataModule:
    cfg = ImageDataConfig(
        "image_folder", path=str(path), cache_dir=str(cache), val_split=None, val_fraction=0.5
    )
    dm = ImageDataModule(cfg, 2, 0)
    dm.setup()
    return dm


def labels_by_red(dm: ImageDataModule) -> dict[int, int]:
    """{red channel of the image's first pixel: its label}, over the whole set."""
    images = np.asarray(dm.images)
    return {int(images[i, 0, 0, 0]): int(dm.labels[i]) for i in range(len(images))}


def test_moving_an_image_to_another_class_rebuilds_the_cache(tmp_path):
    root = colour_folder(tmp_path / "imgs")
    before = labels_by_red(folder_dm(root, tmp_path / "cache"))
    shutil.move(root / "red" / "red1.png", root / "blue" / "red1.png")  # relabel: same bytes
    after = folder_dm(root, tmp_path / "cache")
    moved = labels_by_red(after)
    assert before[180] == before[200] and moved[180] != moved[200]  # red1 is now "blue"
    assert moved[180] == moved[10]  # ... with the blue images (the first blue pixel's red is 10)


def test_one_grayscale_image_among_colour_ones_keeps_the_set_in_colour(tmp_path, capsys):
    root = colour_folder(tmp_path / "imgs")
    solid(root / "blue" / "0gray.png", (120, 120, 120), mode="L")  # read first
    dm = folder_dm(root, tmp_path / "cache")
    assert dm.in_chans == 3
    images = np.asarray(dm.images)
    gray = [i for i in range(len(images)) if len(set(images[i, :, 0, 0].tolist())) == 1]
    assert len(gray) == 1 and images[gray[0], :, 0, 0].tolist() == [120, 120, 120]
    assert {tuple(images[i, :, 0, 0]) for i in range(len(images)) if i != gray[0]} == {
        (200, 10, 10),
        (180, 0, 0),
        (160, 0, 0),
        (10, 10, 200),
        (0, 0, 180),
        (0, 0, 160),
    }
    assert "1 grayscale images among colour ones" in capsys.readouterr().out


def test_an_all_grayscale_set_stays_one_channel(tmp_path):
    root = tmp_path / "imgs"
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
        for i in range(2):
            solid(root / name / f"{i}.png", (40 * i + (name == "b") * 100,) * 3, mode="L")
    assert folder_dm(root, tmp_path / "cache").in_chans == 1


def text_dm(tmp_path, **cfg) -> TextDataModule:
    corpus = tmp_path / "corpus.txt"
    if not corpus.exists():
        corpus.write_text("the quick brown fox jumps over the lazy dog. " * 60)
    cfg = TextDataConfig("text_files", paths=[str(corpus)], cache_dir=str(tmp_path / "c"), **cfg)
    dm = TextDataModule(cfg, block_size=8, batch_size=2, seed=0)
    dm.setup()
    return dm


def test_a_zeroed_token_file_of_the_same_size_is_rebuilt(tmp_path, capsys):
    first = text_dm(tmp_path)
    tokens = np.array(first.train_tokens)
    path = first.cache_path / "train.bin"
    path.write_bytes(bytes(path.stat().st_size))
    again = text_dm(tmp_path)
    assert "train.bin does not match the checksum" in capsys.readouterr().out
    assert np.array_equal(np.array(again.train_tokens), tokens)


@pytest.mark.parametrize("damage", ["delete", "garble"])
def test_a_missing_or_corrupt_vocab_file_is_rebuilt(tmp_path, damage):
    first = text_dm(tmp_path)
    vocab = first.cache_path / "vocab.json"
    vocab.unlink() if damage == "delete" else vocab.write_text("{not json")
    again = text_dm(tmp_path)
    assert again.vocab == first.vocab and again.identity == first.identity


def test_large_entries_are_checked_when_their_files_change(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(data.cache, "VERIFY_BYTES", 0)  # as if the entry were large
    first = text_dm(tmp_path)
    path = first.cache_path / "train.bin"
    stat = path.stat()
    path.write_bytes(bytes(stat.st_size))
    text_dm(tmp_path)
    assert "does not match the checksum" in capsys.readouterr().out
    # A change that keeps the mtime is not seen by the checksum, but the first window is.
    dm = text_dm(tmp_path)
    path = dm.cache_path / "train.bin"
    stat = path.stat()
    path.write_bytes(np.full(stat.st_size // 2, 60000, np.uint16).tobytes())
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    dm = text_dm(tmp_path)
    with pytest.raises(ValueError, match=r"token cache .* holds id 60000, outside the vocab"):
        dm.train_batch(0)


def test_ids_outside_the_vocabulary_fail_in_one_line_naming_the_cache(tmp_path):
    dm = text_dm(tmp_path)
    dm.train_tokens = np.full_like(np.asarray(dm.train_tokens), dm.vocab_size)
    with pytest.raises(ValueError, match=str(dm.cache_path)):
        dm.train_batch(3)
    x, y = text_dm(tmp_path).train_batch(3)
    assert int(torch.cat([x, y]).max()) < dm.vocab_size


def test_a_tokenizer_that_loses_text_is_flagged_and_bpb_counts_the_texts_bytes(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["the", "quick", "brown", "fox", "[UNK]"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    # Spaces vanish and "jumps", "over", "lazy", "dog." become [UNK] (5 bytes decoded each).
    dm = text_dm(tmp_path, tokenizer=str(tmp_path / "tokenizer.json"))
    assert dm.lossy_tokenizer
    text = (tmp_path / "corpus.txt").read_text()
    val_bytes = len(text[len(text) - int(len(text) * 0.1) :].encode())
    val = torch.from_numpy(np.asarray(dm.val_tokens).astype(np.int64))
    assert float(dm.token_bytes[val].sum()) == pytest.approx(val_bytes, rel=1e-9)
    (tmp_path / "char").mkdir()
    char = text_dm(tmp_path / "char")
    assert not char.lossy_tokenizer and char.token_bytes.dtype == torch.int64


def test_a_malformed_tokenizer_file_is_named_with_the_fix(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"version": "1.0", "model": {"type": "Nope"}}')
    with pytest.raises(ValueError, match=rf"{bad} is not a tokenizers JSON file .*data.tokenizer"):
        text_dm(tmp_path, tokenizer=str(bad))


def test_a_cache_dir_that_cannot_be_written_names_the_fix(tmp_path, monkeypatch):
    import errno
    from pathlib import Path

    real_mkdir = Path.mkdir

    def read_only(self, *args, **kwargs):
        if str(self).startswith(str(tmp_path / "c")):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(OSError, match=r"cannot write the data cache .*data\.cache_dir="):
        text_dm(tmp_path)


def test_a_corpus_edited_in_place_with_its_size_and_mtime_kept_is_seen(tmp_path):
    """Its content is part of the cache key (up to corpora.HASHED_BYTES), so the run trains on
    the edited text, under another data.identity, not on the stale cache."""
    first = text_dm(tmp_path)
    corpus = tmp_path / "corpus.txt"
    stat = corpus.stat()
    corpus.write_text(corpus.read_text().replace("quick", "QUICK"))  # same size
    os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same mtime
    assert corpus.stat().st_size == stat.st_size and corpus.stat().st_mtime_ns == stat.st_mtime_ns
    second = text_dm(tmp_path)
    assert second.identity != first.identity
    assert second.vocab_size > first.vocab_size  # Q, U, I, C, K are new characters
