"""Data layer: vocabulary, splits, step-determinism, resume, error messages, offline behaviour."""

from __future__ import annotations

import socket
import time

import lightning.pytorch as L
import pytest
import torch

import data.hub as hub_mod
from data import (
    ImageDataConfig,
    ImageDataModule,
    TextDataConfig,
    TextDataModule,
    load_vocab,
)
from data.text import UNK, load_text
from data.vision import fixed_split


@pytest.fixture(scope="module")
def pydocs() -> TextDataModule:
    dm = TextDataModule(TextDataConfig(), block_size=32, batch_size=4, seed=0)
    dm.setup("fit")
    return dm


@pytest.fixture(scope="module")
def digits() -> ImageDataModule:
    dm = ImageDataModule(ImageDataConfig(), batch_size=64, seed=0)
    dm.setup("fit")
    return dm


def write(tmp_path, name: str, content: str | bytes):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


def take(loader, n: int) -> list:
    it = iter(loader)
    return [next(it) for _ in range(n)]


# ---------------------------------------------------------------- text: vocabulary and split


def test_pydocs_is_the_sorted_python_docs():
    from pydoc_data.topics import topics

    expected = "\n".join(topics[k] for k in sorted(topics))
    assert load_text(TextDataConfig()) == expected
    assert len(expected) > 400_000


def test_vocab_is_sorted_train_chars_and_round_trips(pydocs):
    n_train = len(pydocs.train_tokens)
    train_text = load_text(pydocs.cfg)[:n_train]
    assert pydocs.vocab == sorted(set(train_text)) + [UNK]
    assert pydocs.vocab_size == len(pydocs.vocab)
    sample = train_text[1000:3000]
    ids = pydocs.encode(sample)
    assert ids.dtype == torch.long
    assert ids.tolist() == [pydocs.vocab.index(c) for c in sample]  # independent lookup
    assert pydocs.decode(ids) == sample
    assert pydocs.decode(ids.tolist()) == sample


def test_split_is_contiguous_disjoint_and_deterministic(pydocs):
    text = load_text(pydocs.cfg)
    n_val = int(len(text) * 0.1)
    assert len(pydocs.val_tokens) == n_val
    assert len(pydocs.train_tokens) + n_val == len(text)
    assert pydocs.decode(pydocs.train_tokens) == text[: len(text) - n_val]
    again = TextDataModule(TextDataConfig(), block_size=32, batch_size=4, seed=7)
    again.setup()
    assert torch.equal(again.train_tokens, pydocs.train_tokens)
    assert torch.equal(again.val_tokens, pydocs.val_tokens)


def test_val_chars_unseen_in_train_map_to_unknown(tmp_path):
    # The last 10% is val: 'z' and the second emoji (a higher code point than any train char) are
    # val only.
    path = write(tmp_path, "a.txt", "ab\U0001f600" * 40 + "abz\U0001f60e")
    dm = TextDataModule(TextDataConfig("text_files", paths=[path]), 8, 2, 0)
    dm.setup()
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


# ---------------------------------------------------------------- text: batches


def test_train_batch_windows_come_from_train_text_and_y_is_shifted(pydocs):
    train_text = pydocs.decode(pydocs.train_tokens)
    x, y = pydocs.train_batch(0)
    assert x.shape == y.shape == (4, 32) and x.dtype == y.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])
    for row_x, row_y in zip(x, y, strict=True):
        assert pydocs.decode(row_x) + pydocs.decode(row_y[-1:]) in train_text


def test_batch_is_a_pure_function_of_seed_and_step(pydocs):
    other = TextDataModule(pydocs.cfg, block_size=32, batch_size=4, seed=0)
    other.setup()
    for step in (0, 1, 999):
        assert all(map(torch.equal, pydocs.train_batch(step), other.train_batch(step)))
    assert not torch.equal(pydocs.train_batch(0)[0], pydocs.train_batch(1)[0])
    reseeded = TextDataModule(pydocs.cfg, block_size=32, batch_size=4, seed=1)
    reseeded.setup()
    assert not torch.equal(pydocs.train_batch(0)[0], reseeded.train_batch(0)[0])


def test_loader_follows_steps_and_start_step_continues_the_sequence(pydocs):
    full = take(pydocs.train_dataloader(), 8)
    for s, (x, y) in enumerate(full):
        assert torch.equal(x, pydocs.train_batch(s)[0]) and torch.equal(y, pydocs.train_batch(s)[1])
    resumed = TextDataModule(pydocs.cfg, block_size=32, batch_size=4, seed=0)
    resumed.setup()
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


@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader`")
def test_resume_through_a_lightning_checkpoint(tmp_path):
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

    def fit(max_steps: int, ckpt: str | None) -> list[torch.Tensor]:
        dm = TextDataModule(TextDataConfig(max_chars=5000), block_size=8, batch_size=2, seed=3)
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
    ref = TextDataModule(TextDataConfig(max_chars=5000), block_size=8, batch_size=2, seed=3)
    ref.setup()
    expected = [ref.train_batch(s)[0] for s in range(5)]
    assert len(first) == 3 and len(second) == 2
    assert all(map(torch.equal, first + second, expected))


# ---------------------------------------------------------------- text: sources and errors


def test_text_files_source(tmp_path):
    a = write(tmp_path, "a.txt", "hello world\n" * 20)
    b = write(tmp_path, "b.txt", "second file\n" * 20)
    dm = TextDataModule(TextDataConfig("text_files", paths=[a, b]), 16, 2, 0)
    dm.setup()
    text = "hello world\n" * 20 + "\n" + "second file\n" * 20
    n_train = len(text) - int(len(text) * 0.1)
    assert dm.decode(dm.train_tokens) == text[:n_train]


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
    dm = TextDataModule(TextDataConfig("text_files", paths=[path]), 8, 2, 0)
    with pytest.raises(error, match=match):
        dm.setup()


def test_config_errors_name_the_fix(tmp_path):
    with pytest.raises(ValueError, match="data.paths"):
        TextDataModule(TextDataConfig("text_files"), 8, 2, 0).setup()
    with pytest.raises(ValueError, match="choose one of"):
        TextDataModule(TextDataConfig("nope"), 8, 2, 0)
    with pytest.raises(ValueError, match="val_fraction"):
        TextDataModule(TextDataConfig(val_fraction=1.0), 8, 2, 0)
    with pytest.raises(ValueError, match="lower model.block_size"):
        TextDataModule(TextDataConfig(max_chars=2000), 512, 2, 0).setup()
    with pytest.raises(RuntimeError, match="setup"):
        _ = TextDataModule(TextDataConfig(), 8, 2, 0).vocab_size


def test_hf_text_offline_fails_fast(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    dm = TextDataModule(TextDataConfig("hf_text", hf_id="roneneldan/TinyStories"), 8, 2, 0)
    start = time.perf_counter()
    with pytest.raises(ConnectionError, match="HF_HUB_OFFLINE.*data=text_files") as err:
        dm.setup()
    assert time.perf_counter() - start < 5
    assert "\n" not in str(err.value)


def test_hub_unreachable_fails_fast(monkeypatch):
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: refused at once
    with pytest.raises(ConnectionError, match="cannot reach 127.0.0.1.*go online"):
        TextDataModule(TextDataConfig("hf_text", hf_id="x/y"), 8, 2, 0).setup()

    def hang(*args, **kwargs):  # a blackholed network: connect times out long after our limit
        time.sleep(3)
        raise OSError("timed out")

    monkeypatch.setattr(socket, "create_connection", hang)
    monkeypatch.setattr(hub_mod, "HUB_TIMEOUT_S", 0.2)
    start = time.perf_counter()
    with pytest.raises(ConnectionError, match="data=digits"):
        ImageDataModule(ImageDataConfig("hf_image", hf_id="ylecun/mnist"), 8, 0).setup()
    assert time.perf_counter() - start < 1.5


# ---------------------------------------------------------------- images


def test_digits_shapes_split_and_normalization(digits):
    from sklearn.datasets import load_digits

    raw_x, raw_y = load_digits(return_X_y=True)
    assert (digits.image_size, digits.in_chans, digits.num_classes) == (8, 1, 10)
    assert digits.train_images.shape == (1438, 1, 8, 8) and digits.val_images.shape == (
        359,
        1,
        8,
        8,
    )
    train_idx, val_idx = fixed_split(1797, 0.2)
    assert sorted(torch.cat([train_idx, val_idx]).tolist()) == list(range(1797))  # disjoint, all
    pixels = torch.tensor(raw_x, dtype=torch.float32) / 16
    mean, std = pixels[train_idx].mean(), pixels[train_idx].std()
    expected = ((pixels[val_idx] - mean) / std).view(-1, 1, 8, 8)
    torch.testing.assert_close(digits.val_images, expected)
    assert torch.equal(digits.val_labels, torch.tensor(raw_y)[val_idx])
    assert abs(digits.train_images.mean().item()) < 1e-4
    assert abs(digits.train_images.std().item() - 1) < 1e-4
    assert set(digits.train_labels.tolist()) == set(range(10))


def test_digits_split_ignores_run_seed(digits):
    other = ImageDataModule(ImageDataConfig(), batch_size=64, seed=123)
    other.setup()
    assert torch.equal(other.val_images, digits.val_images)


def test_image_batches_are_step_deterministic_and_cover_an_epoch(digits):
    x0, y0 = digits.train_batch(0)
    assert x0.shape == (64, 1, 8, 8) and x0.dtype == torch.float32 and y0.dtype == torch.long
    assert all(map(torch.equal, digits.train_batch(0), digits.train_batch(0)))
    assert not torch.equal(x0, digits.train_batch(1)[0])
    epoch = torch.cat([digits.train_batch(s)[0] for s in range(1438 // 64)]).flatten(1)
    distinct_train = len(torch.unique(digits.train_images.flatten(1), dim=0))
    assert len(torch.unique(epoch, dim=0)) >= len(epoch) - (1438 - distinct_train)
    loader = take(digits.train_dataloader(), 6)
    digits.start_step = 4
    try:
        resumed = take(digits.train_dataloader(), 2)
    finally:
        digits.start_step = 0
    for (x, y), (rx, ry) in zip(loader[4:], resumed, strict=True):
        assert torch.equal(x, rx) and torch.equal(y, ry)


def test_image_val_is_the_whole_split_in_order(digits):
    batches = list(digits.val_dataloader())
    assert [len(y) for _, y in batches] == [64] * 5 + [359 - 320]
    assert torch.equal(torch.cat([x for x, _ in batches]), digits.val_images)
    assert torch.equal(torch.cat([y for _, y in batches]), digits.val_labels)


def test_image_config_errors():
    with pytest.raises(ValueError, match="choose one of"):
        ImageDataModule(ImageDataConfig("cifar"), 8, 0)
    with pytest.raises(ValueError, match="hf_id"):
        ImageDataModule(ImageDataConfig("hf_image"), 8, 0).setup()
    big = ImageDataModule(ImageDataConfig(), batch_size=5000, seed=0)
    big.setup()
    with pytest.raises(ValueError, match="lower data.batch_size"):
        big.train_batch(0)


def test_hf_image_converts_pil_images(monkeypatch):
    import datasets
    from PIL import Image

    import data.vision as vision_mod

    def pixels(n: int, shift: int) -> torch.Tensor:  # (N, H, W, C) uint8
        return (
            (torch.arange(6 * 6 * 3).view(1, 6, 6, 3) * (torch.arange(n) + shift).view(-1, 1, 1, 1))
            % 256
        ).byte()

    def fake_split(n: int, shift: int) -> datasets.Dataset:
        features = datasets.Features(
            {"img": datasets.Image(), "fine_label": datasets.ClassLabel(names=list("abcde"))}
        )
        pics = [Image.fromarray(p.numpy()) for p in pixels(n, shift)]
        labels = [i % 3 for i in range(n)]
        return datasets.Dataset.from_dict({"img": pics, "fine_label": labels}, features=features)

    splits = {"train": fake_split(10, 1), "test": fake_split(4, 20)}
    monkeypatch.setattr(vision_mod, "load_hub_dataset", lambda hf_id, cfg, split, fb: splits[split])
    cfg = ImageDataConfig("hf_image", hf_id="fake/rgb", image_column="img")
    with pytest.raises(ValueError, match=r"no column 'label'.*\['img', 'fine_label'\]"):
        ImageDataModule(cfg, 4, 0).setup()
    cfg.label_column = "fine_label"
    dm = ImageDataModule(cfg, 4, 0)
    dm.setup()
    assert (dm.image_size, dm.in_chans, dm.num_classes) == (6, 3, 5)  # classes from ClassLabel
    raw = pixels(10, 1).permute(0, 3, 1, 2).float() / 255  # (N, C, H, W)
    mean, std = raw.mean(dim=(0, 2, 3)), raw.std(dim=(0, 2, 3))
    torch.testing.assert_close(dm.train_images, (raw - mean[:, None, None]) / std[:, None, None])
    assert dm.val_images.shape == (4, 3, 6, 6) and dm.val_labels.tolist() == [0, 1, 2, 0]
    cfg.image_size = 4
    small = ImageDataModule(cfg, 4, 0)
    small.setup()
    assert small.train_images.shape == (10, 3, 4, 4) and small.image_size == 4


# ---------------------------------------------------------------- pinned batches


def digest(tensors) -> str:
    """sha256 over each tensor's shape, dtype and bytes: equal digests mean bit-identical data."""
    import hashlib

    h = hashlib.sha256()
    for t in tensors:
        h.update(f"{tuple(t.shape)}{t.dtype}".encode())
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def test_default_job_batches_are_pinned():
    """The default job's data (pydocs, char level, block 128, batch 32, seed 0) and the ViT's
    digits: digests taken from the code before the data layer was restructured."""
    dm = TextDataModule(TextDataConfig(), block_size=128, batch_size=32, seed=0)
    dm.setup()
    assert digest([t for s in range(3) for t in dm.train_batch(s)]) == "c6103dab973bcf6d"
    assert digest([t for b in dm.val_dataloader() for t in b]) == "d1f6dd995e16c68d"
    small = TextDataModule(TextDataConfig(), block_size=16, batch_size=4, seed=1)
    small.setup()
    assert digest([t for s in range(3) for t in small.train_batch(s)]) == "6ca654d4a1eb63d6"
    assert digest([t for b in small.val_dataloader() for t in b]) == "f92959b58c2ed001"
    im = ImageDataModule(ImageDataConfig(), batch_size=64, seed=0)
    im.setup()
    assert digest([t for s in range(3) for t in im.train_batch(s)]) == "6063a9f69ea0cea4"
    assert digest(im.train_batch(30)) == "5c2d95c833687bc7"  # second epoch: a new permutation
    assert digest([t for b in im.val_dataloader() for t in b]) == "80ff11b0df4a1b46"
