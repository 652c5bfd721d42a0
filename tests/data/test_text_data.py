"""Text data: corpora and splits, tokenizers, step-indexed windows from the token files, resume."""

from __future__ import annotations

import lightning.pytorch as L
import numpy as np
import pytest
import torch

from data.config import TextDataConfig
from data.corpora import CHUNK_CHARS, load_text
from data.text import TextDataModule
from data.tokenizer import UNK, load_vocab, token_dtype
from tests.data.helpers import digest, take, write


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("cache"))


def text_dm(cache: str, block: int = 32, batch: int = 4, seed: int = 0, **cfg) -> TextDataModule:
    dm = TextDataModule(TextDataConfig(cache_dir=cache, **cfg), block, batch, seed)
    dm.setup()
    return dm


@pytest.fixture(scope="module")
def pydocs(cache) -> TextDataModule:
    return text_dm(cache)


@pytest.fixture(scope="module")
def pydocs_text() -> str:
    return load_text(TextDataConfig())


def train_part(text: str, val_fraction: float = 0.1) -> str:
    return text[: len(text) - int(len(text) * val_fraction)]


# ---------------------------------------------------------------- the default job, pinned


def test_default_job_batches_are_pinned(cache):
    """The default job's data (pydocs, char level, block 128, batch 32, seed 0): digests taken
    from the code before the token files existed (one in-memory int64 tensor then)."""
    dm = text_dm(cache, block=128, batch=32)
    assert digest([t for s in range(3) for t in dm.train_batch(s)]) == "c6103dab973bcf6d"
    assert digest([t for b in dm.val_dataloader() for t in b]) == "d1f6dd995e16c68d"
    small = text_dm(cache, block=16, batch=4, seed=1)
    assert digest([t for s in range(3) for t in small.train_batch(s)]) == "6ca654d4a1eb63d6"
    assert digest([t for b in small.val_dataloader() for t in b]) == "f92959b58c2ed001"


# ---------------------------------------------------------------- char level: vocabulary, split


def test_pydocs_is_the_sorted_python_docs(pydocs_text):
    from pydoc_data.topics import topics

    assert pydocs_text == "\n".join(topics[k] for k in sorted(topics))
    assert len(pydocs_text) > 400_000


def test_vocab_is_sorted_train_chars_and_round_trips(pydocs, pydocs_text):
    train_text = train_part(pydocs_text)
    assert pydocs.vocab == sorted(set(train_text)) + [UNK]
    assert pydocs.vocab_size == len(pydocs.vocab)
    sample = train_text[1000:3000]
    ids = pydocs.encode(sample)
    assert ids.dtype == torch.long
    assert ids.tolist() == [pydocs.vocab.index(c) for c in sample]  # independent lookup
    assert pydocs.decode(ids) == sample
    assert pydocs.decode(ids.tolist()) == sample


def test_token_files_hold_the_contiguous_split(pydocs, pydocs_text, cache):
    n_val = int(len(pydocs_text) * 0.1)
    assert isinstance(pydocs.train_tokens, np.memmap) and pydocs.train_tokens.dtype == np.uint16
    assert len(pydocs.val_tokens) == n_val
    assert len(pydocs.train_tokens) + n_val == len(pydocs_text)
    assert pydocs.decode(pydocs.train_tokens) == pydocs_text[:-n_val]
    assert pydocs.decode(pydocs.val_tokens) == pydocs_text[-n_val:]
    again = text_dm(cache, seed=7)
    assert again.cache_path == pydocs.cache_path  # the seed is no part of the data
    assert np.array_equal(again.train_tokens, pydocs.train_tokens)


def test_val_chars_unseen_in_train_map_to_unknown(tmp_path):
    # The last 10% is val: 'z' and the second emoji (a higher code point than any train char) are
    # val only.
    path = write(tmp_path, "a.txt", "ab\U0001f600" * 40 + "abz\U0001f60e")
    dm = text_dm(str(tmp_path / "c"), 8, 2, source="text_files", paths=[path])
    assert dm.vocab == ["a", "b", "\U0001f600", UNK]
    assert dm.val_tokens[-2:].tolist() == [3, 3]
    assert dm.decode(dm.val_tokens[-5:]) == "\U0001f600ab" + UNK + UNK


def test_save_and_load_vocab(pydocs, tmp_path):
    pydocs.save_vocab(tmp_path / "vocab.json")
    vocab = load_vocab(tmp_path / "vocab.json")
    assert vocab.chars == pydocs.vocab
    assert vocab.unk_id == pydocs.vocab.index(UNK)
    x, _ = pydocs.train_batch(3)
    assert vocab.decode(x[0]) == pydocs.decode(x[0])
    assert torch.equal(vocab.encode("def f(): pass\u2603"), pydocs.encode("def f(): pass\u2603"))


def test_a_vocab_beyond_65536_ids_is_stored_as_uint32(tmp_path):
    chars = [chr(c) for c in range(0x10000, 0x10000 + 70_000)]  # above U+FFFD (UNK)
    text = "".join(chars) + "".join(chars[:1000])  # every char in train; val repeats the start
    path = write(tmp_path, "a", text)
    dm = text_dm(str(tmp_path / "c"), 8, 2, source="text_files", paths=[path], val_fraction=0.01)
    assert dm.vocab_size == len(chars) + 1 > 1 << 16
    assert dm.train_tokens.dtype == np.uint32 and token_dtype(1 << 16) == np.uint16
    assert dm.decode(dm.val_tokens) == text[-len(dm.val_tokens) :]


# ---------------------------------------------------------------- bytes and BPE


def test_bytes_tokenizer_reads_utf8_bytes(tmp_path, pydocs_text):
    dm = text_dm(str(tmp_path), tokenizer="bytes")
    train = train_part(pydocs_text).encode("utf-8")
    assert dm.vocab_size == 256 and dm.train_tokens.dtype == np.uint16
    assert dm.train_tokens.tobytes() == np.frombuffer(train, np.uint8).astype(np.uint16).tobytes()
    assert torch.equal(dm.token_bytes, torch.ones(256, dtype=torch.long))
    assert dm.decode(dm.encode("naïve ☃")) == "naïve ☃"


def test_bpe_is_trained_on_train_reused_from_the_cache_and_lossless(
    tmp_path, pydocs_text, monkeypatch
):
    import data.tokens

    dm = text_dm(str(tmp_path), tokenizer="bpe", vocab_size=512)
    assert dm.vocab_size == 512 and (dm.cache_path / "tokenizer.json").exists()
    train = train_part(pydocs_text)
    assert dm.decode(dm.train_tokens) == train  # byte-level: nothing lost
    assert len(dm.train_tokens) < 0.5 * len(train.encode())  # and it compresses
    ids = torch.from_numpy(dm.train_tokens.astype(np.int64))
    assert int(dm.token_bytes[ids].sum()) == len(train.encode("utf-8"))  # bytes per token exact

    def no_training(*args, **kwargs):
        raise AssertionError("the cached tokenizer should have been reused")

    monkeypatch.setattr(data.tokens, "fit_bpe", no_training)
    again = text_dm(str(tmp_path), tokenizer="bpe", vocab_size=512)
    assert np.array_equal(again.val_tokens, dm.val_tokens)
    with pytest.raises(AssertionError, match="reused"):  # another vocab size is another entry
        text_dm(str(tmp_path), tokenizer="bpe", vocab_size=600)


def test_a_tokenizer_json_path_gives_the_same_ids(tmp_path):
    bpe = text_dm(str(tmp_path / "a"), tokenizer="bpe", vocab_size=300)
    by_path = text_dm(str(tmp_path / "b"), tokenizer=str(bpe.cache_path / "tokenizer.json"))
    assert np.array_equal(by_path.train_tokens, bpe.train_tokens)
    bpe.save_vocab(tmp_path / "vocab.json")
    assert load_vocab(tmp_path / "vocab.json").decode(bpe.val_tokens[:50]) == bpe.decode(
        bpe.val_tokens[:50]
    )


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        ({"tokenizer": "bpe", "vocab_size": 100}, "vocab_size >= 256"),
        ({"tokenizer": "no such tokenizer!"}, "unknown tokenizer.*char, bytes, bpe"),
        ({"tokenizer": "missing/tokenizer.json"}, "tokenizer file not found"),
        ({"tokenizer": ""}, "choose one of"),
        ({"val_tokens": 0}, "val_tokens"),
    ],
)
def test_tokenizer_settings_fail_with_the_fix(tmp_path, cfg, match):
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        text_dm(str(tmp_path), **cfg)


# ---------------------------------------------------------------- batches


def test_train_batch_windows_come_from_train_text_and_y_is_shifted(pydocs):
    train_text = pydocs.decode(pydocs.train_tokens)
    x, y = pydocs.train_batch(0)
    assert x.shape == y.shape == (4, 32) and x.dtype == y.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])
    for row_x, row_y in zip(x, y, strict=True):
        assert pydocs.decode(row_x) + pydocs.decode(row_y[-1:]) in train_text


def test_batch_is_a_pure_function_of_seed_and_step(pydocs, cache):
    other = text_dm(cache)
    for step in (0, 1, 999):
        assert all(map(torch.equal, pydocs.train_batch(step), other.train_batch(step)))
    assert not torch.equal(pydocs.train_batch(0)[0], pydocs.train_batch(1)[0])
    reseeded = text_dm(cache, seed=1)
    assert not torch.equal(pydocs.train_batch(0)[0], reseeded.train_batch(0)[0])


def test_rank_rows_are_slices_of_the_global_batch(pydocs):
    full = pydocs.train_batch(5, 8)
    for rank in range(2):
        part = pydocs.train_batch(5, 8, slice(rank * 4, rank * 4 + 4))
        assert all(
            torch.equal(p, f[rank * 4 : rank * 4 + 4]) for p, f in zip(part, full, strict=True)
        )


def test_loader_follows_steps_and_start_step_continues_the_sequence(pydocs, cache):
    full = take(pydocs.train_dataloader(), 8)
    for s, (x, y) in enumerate(full):
        assert torch.equal(x, pydocs.train_batch(s)[0]) and torch.equal(y, pydocs.train_batch(s)[1])
    resumed = text_dm(cache)
    resumed.load_state_dict({"start_step": 5})
    assert resumed.state_dict() == {"start_step": 5}
    for (x, _), (fx, _) in zip(take(resumed.train_dataloader(), 3), full[5:], strict=True):
        assert torch.equal(x, fx)


def test_val_batches_are_fixed_and_inside_the_val_split(pydocs):
    first, second = list(pydocs.val_dataloader()), list(pydocs.val_dataloader())
    assert len(first) == 8
    val_text = pydocs.decode(pydocs.val_tokens)
    for (x, y), (x2, y2) in zip(first, second, strict=True):
        assert torch.equal(x, x2) and torch.equal(y, y2)
        assert torch.equal(x[:, 1:], y[:, :-1])
        assert pydocs.decode(x[0]) + pydocs.decode(y[0, -1:]) in val_text
    starts = [pydocs.decode(x[0]) for x, _ in first]
    assert len(set(starts)) == len(starts)  # spread out, not one window repeated


def test_val_tokens_sets_the_number_of_val_windows(cache):
    dm = text_dm(cache, block=32, batch=4, val_tokens=1000)  # 1000 / (4 x 32) -> 8 batches
    batches = list(dm.val_dataloader())
    assert len(batches) == 8 and sum(y.numel() for _, y in batches) >= 1000
    assert len(list(text_dm(cache, block=32, batch=4, val_tokens=129).val_dataloader())) == 2


@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader`")
@pytest.mark.parametrize("tokenizer", ["char", "bpe"])
def test_resume_through_a_lightning_checkpoint(tmp_path, tokenizer):
    class Recorder(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(()))
            self.seen: list[torch.Tensor] = []

        def training_step(self, batch, batch_idx):
            self.seen.append(batch[0])
            return self.w * 0 + batch[0].float().mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    cfg = TextDataConfig(
        max_chars=5000, tokenizer=tokenizer, vocab_size=300, cache_dir=str(tmp_path)
    )

    def fit(max_steps: int, ckpt: str | None) -> list[torch.Tensor]:
        dm = TextDataModule(cfg, block_size=8, batch_size=2, seed=3)
        model = Recorder()
        trainer = L.Trainer(
            max_steps=max_steps,
            default_root_dir=tmp_path,
            enable_checkpointing=False,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
        )
        trainer.fit(model, datamodule=dm, ckpt_path=ckpt)
        if ckpt is None:
            trainer.save_checkpoint(tmp_path / "mid.ckpt")
        return model.seen

    first = fit(3, None)
    second = fit(5, str(tmp_path / "mid.ckpt"))
    ref = TextDataModule(cfg, block_size=8, batch_size=2, seed=3)
    ref.setup()
    expected = [ref.train_batch(s)[0] for s in range(5)]
    assert len(first) == 3 and len(second) == 2
    assert all(map(torch.equal, first + second, expected))


# ---------------------------------------------------------------- text files


def test_text_files_are_documents_joined_by_newlines(tmp_path):
    a = write(tmp_path, "a.txt", "hello world\n" * 20)
    big = "".join(
        chr(0x61 + i % 26) + ("é\n" if i % 50 == 0 else "") for i in range(CHUNK_CHARS * 2)
    )
    b = write(tmp_path, "b.txt", big)  # read in three chunks, a multi-byte char among them
    dm = text_dm(str(tmp_path / "c"), 16, 2, source="text_files", paths=[a, b])
    text = "hello world\n" * 20 + "\n" + big
    assert dm.decode(dm.train_tokens) == train_part(text)
    assert dm.decode(dm.val_tokens) == text[len(train_part(text)) :]


def test_a_changed_text_file_is_prepared_again(tmp_path):
    path = write(tmp_path, "a.txt", "one two three " * 50)
    first = text_dm(str(tmp_path / "c"), 8, 2, source="text_files", paths=[path])
    write(tmp_path, "a.txt", "four five six! " * 50)
    second = text_dm(str(tmp_path / "c"), 8, 2, source="text_files", paths=[path])
    assert first.cache_path != second.cache_path and "!" in second.vocab


@pytest.mark.parametrize(
    ("content", "error", "match"),
    [
        (None, FileNotFoundError, "not found.*data.paths"),
        ("", ValueError, "empty.*data.paths"),
        (b"\xff\xfe\xfa bad bytes", ValueError, "UTF-8"),
    ],
)
def test_text_files_bad_input_fails_clearly(tmp_path, content, error, match):
    path = str(tmp_path / "missing.txt") if content is None else write(tmp_path, "x.txt", content)
    with pytest.raises(error, match=match):
        text_dm(str(tmp_path / "c"), 8, 2, source="text_files", paths=[path])
    assert not list((tmp_path / "c").glob("text/*/"))  # nothing half-built left behind


def test_config_errors_name_the_fix(tmp_path):
    cache = str(tmp_path)
    with pytest.raises(ValueError, match="data.paths"):
        text_dm(cache, source="text_files")
    with pytest.raises(ValueError, match="choose one of"):
        TextDataModule(TextDataConfig("nope"), 8, 2, 0)
    with pytest.raises(ValueError, match="val_fraction"):
        TextDataModule(TextDataConfig(val_fraction=1.0), 8, 2, 0)
    with pytest.raises(ValueError, match="lower model.block_size"):
        text_dm(cache, 512, 2, max_chars=2000)
    with pytest.raises(RuntimeError, match="setup"):
        _ = TextDataModule(TextDataConfig(), 8, 2, 0).vocab_size


def test_train_tokens_draws_every_window_from_the_first_n_and_keeps_the_rest(cache, pydocs):
    """data.train_tokens=N: a dataset-size study at a fixed step count. Every train window lies
    inside the first N train tokens (by the window's own tokens, found in that prefix); the
    vocabulary, the val windows and the unigram baseline are the whole corpus's."""
    small = text_dm(cache, train_tokens=500)
    assert small.vocab == pydocs.vocab and small.unigram_loss == pydocs.unigram_loss
    for a, b in zip(small.val_dataloader(), pydocs.val_dataloader(), strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    prefix = torch.from_numpy(np.asarray(pydocs.train_tokens[:500], dtype=np.int64))
    windows = prefix.unfold(0, 33, 1)  # every window of block + 1 tokens inside the prefix
    for step in range(20):
        x, y = small.train_batch(step)
        rows = torch.cat([x, y[:, -1:]], dim=1)
        assert all((windows == row).all(dim=1).any() for row in rows)
    with pytest.raises(ValueError, match=r"data.train_tokens=20 must lie in \(33, "):
        text_dm(cache, train_tokens=20)
