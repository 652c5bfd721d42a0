"""Image data: digits, a CIFAR-shaped PNG folder, a saved Dataset, uint8 storage, augmentation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from data.config import ImageDataConfig
from data.vision import ImageDataModule, fixed_split, random_crop
from tests.data.helpers import digest, take

CLASSES = ("airplane", "bird", "cat")


@pytest.fixture(scope="module")
def digits() -> ImageDataModule:
    dm = ImageDataModule(ImageDataConfig(), batch_size=64, seed=0)
    dm.setup("fit")
    return dm


def pixels(n: int, shift: int) -> np.ndarray:
    """(N, 32, 32, 3) uint8 images, each different, with structure left to right."""
    base = np.arange(32 * 32 * 3, dtype=np.int64).reshape(1, 32, 32, 3)
    return ((base * (np.arange(n) + shift).reshape(-1, 1, 1, 1)) % 251).astype(np.uint8)


@pytest.fixture(scope="module")
def cifar_folder(tmp_path_factory):
    """train/ and test/ with one PNG folder per class: 4 train and 2 test images a class."""
    from PIL import Image

    root = tmp_path_factory.mktemp("cifar")
    arrays = {}
    for split, n in (("train", 4), ("test", 2)):
        for c, name in enumerate(CLASSES):
            (root / split / name).mkdir(parents=True)
            for i, pic in enumerate(pixels(n, 10 * c + 3 * (split == "test"))):
                Image.fromarray(pic).save(root / split / name / f"{i}.png")
                arrays[(split, name, i)] = pic
    return root, arrays


def folder_dm(path, cache, batch_size: int = 4, **cfg) -> ImageDataModule:
    cfg = ImageDataConfig("image_folder", path=str(path), cache_dir=str(cache), **cfg)
    dm = ImageDataModule(cfg, batch_size, 0)
    dm.setup()
    return dm


def val_images(dm: ImageDataModule) -> tuple[torch.Tensor, torch.Tensor]:
    batches = list(dm.val_dataloader())
    return torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches])


# ---------------------------------------------------------------- digits


def test_digits_batches_are_pinned(digits):
    """Digests taken from the code that held digits as normalized float32 in memory."""
    assert digest([t for s in range(3) for t in digits.train_batch(s)]) == "6063a9f69ea0cea4"
    assert digest(digits.train_batch(30)) == "5c2d95c833687bc7"  # second epoch: a new permutation
    assert digest([t for b in digits.val_dataloader() for t in b]) == "80ff11b0df4a1b46"


def test_digits_stay_uint8_and_are_normalized_per_batch(digits):
    from sklearn.datasets import load_digits

    raw_x, raw_y = load_digits(return_X_y=True)
    assert (digits.image_size, digits.in_chans, digits.num_classes) == (8, 1, 10)
    assert digits.images.dtype == np.uint8 and digits.images.shape == (1797, 1, 8, 8)
    train_idx, val_idx = fixed_split(1797, 0.2)
    assert (len(train_idx), len(val_idx)) == (1438, 359)
    assert sorted(torch.cat([train_idx, val_idx]).tolist()) == list(range(1797))  # disjoint, all
    all_pixels = torch.tensor(raw_x, dtype=torch.float32) / 16
    mean, std = all_pixels[train_idx].mean(), all_pixels[train_idx].std()
    x, y = val_images(digits)
    torch.testing.assert_close(x, ((all_pixels[val_idx] - mean) / std).view(-1, 1, 8, 8))
    assert torch.equal(y, torch.tensor(raw_y)[val_idx])
    train = torch.cat([digits.train_batch(s)[0] for s in range(1438 // 64)])
    assert abs(train.mean().item()) < 0.02 and abs(train.std().item() - 1) < 0.02


def test_digits_split_ignores_run_seed(digits):
    other = ImageDataModule(ImageDataConfig(), batch_size=64, seed=123)
    other.setup()
    assert torch.equal(val_images(other)[0], val_images(digits)[0])


def test_image_batches_are_step_deterministic_and_cover_an_epoch(digits):
    x0, y0 = digits.train_batch(0)
    assert x0.shape == (64, 1, 8, 8) and x0.dtype == torch.float32 and y0.dtype == torch.long
    assert all(map(torch.equal, digits.train_batch(0), digits.train_batch(0)))
    assert not torch.equal(x0, digits.train_batch(1)[0])
    epoch = torch.cat([digits.train_batch(s)[0] for s in range(1438 // 64)]).flatten(1)
    train = digits.images[digits.train_idx.numpy()].reshape(1438, -1)
    distinct_train = len(np.unique(train, axis=0))
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


def test_image_config_errors(tmp_path):
    with pytest.raises(ValueError, match="choose one of"):
        ImageDataModule(ImageDataConfig("cifar"), 8, 0)
    with pytest.raises(ValueError, match="hf_id"):
        ImageDataModule(ImageDataConfig("hf_image", cache_dir=str(tmp_path)), 8, 0).setup()
    with pytest.raises(ValueError, match="unknown data.augment 'rotate'.*crop"):
        ImageDataModule(ImageDataConfig(augment=["rotate"]), 8, 0)
    big = ImageDataModule(ImageDataConfig(), batch_size=5000, seed=0)
    big.setup()
    with pytest.raises(ValueError, match="lower data.batch_size"):
        big.train_batch(0)


# ---------------------------------------------------------------- image folders and saved sets


def test_a_png_folder_trains_from_uint8_with_its_test_split(cifar_folder, tmp_path):
    root, arrays = cifar_folder
    dm = folder_dm(root, tmp_path, val_split="auto")
    assert (dm.image_size, dm.in_chans, dm.num_classes) == (32, 3, 3)
    assert dm.images.dtype == np.uint8 and dm.images.shape == (12, 3, 32, 32)
    assert isinstance(dm.images, np.memmap)  # decoded once into the cache, read from disk
    expected = {name: [] for name in CLASSES}
    for (split, name, _), pic in arrays.items():
        if split == "test":
            expected[name].append(pic.transpose(2, 0, 1))
    x, y = val_images(dm)
    raw = torch.from_numpy(np.stack([e for n in CLASSES for e in expected[n]])).float() / 255
    train = torch.from_numpy(np.stack([v for (s, *_), v in arrays.items() if s == "train"]))
    train = train.permute(0, 3, 1, 2).double() / 255
    mean, std = train.mean(dim=(0, 2, 3)), train.std(dim=(0, 2, 3))
    norm = (raw - mean.float()[:, None, None]) / std.float()[:, None, None]
    order = torch.argsort(y, stable=True)  # the folder builder's file order within a class
    assert sorted(y.tolist()) == [0, 0, 1, 1, 2, 2]
    for row in norm:  # every test image is in val, normalized with the train statistics
        assert any(torch.allclose(row, x[i], atol=1e-5) for i in order)


def test_a_flat_class_folder_carves_val_and_a_saved_dataset_loads(cifar_folder, tmp_path):
    import datasets

    root, arrays = cifar_folder
    flat = folder_dm(root / "train", tmp_path / "a", val_split="auto", val_fraction=0.25)
    assert len(flat.train_idx) == 9 and len(flat.val_idx) == 3 and flat.num_classes == 3
    pics = [arrays[("train", n, i)] for n in CLASSES for i in range(4)]
    labels = [c for c in range(3) for _ in range(4)]
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=list(CLASSES))}
    )
    saved = datasets.Dataset.from_dict({"image": pics, "label": labels}, features=features)
    saved.train_test_split(test_size=3, seed=0).save_to_disk(str(tmp_path / "saved"))
    dm = folder_dm(tmp_path / "saved", tmp_path / "b")
    assert len(dm.images) == 9 and len(dm.val_images) == 3  # its own test split
    assert {tuple(p.tobytes() for p in [dm.images[i].transpose(1, 2, 0)]) for i in range(9)} <= {
        (p.tobytes(),) for p in pics
    }


@pytest.mark.parametrize(
    ("layout", "match"),
    [
        ("empty", "holds no images; put them in one subfolder per class"),
        ("one_class", "single class"),
        ("missing", "is not a directory"),
    ],
)
def test_bad_image_folders_fail_with_the_fix(tmp_path, layout, match):
    from PIL import Image

    root = tmp_path / "imgs"
    if layout != "missing":
        (root / "cat").mkdir(parents=True)
    if layout == "one_class":
        for i in range(3):
            Image.fromarray(pixels(1, i)[0]).save(root / "cat" / f"{i}.png")
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        folder_dm(root, tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("images/*/"))


# ---------------------------------------------------------------- augmentation


def test_crop_is_a_shift_of_the_padded_image_within_the_padding():
    x = torch.randn(6, 3, 8, 8)
    gen = torch.Generator().manual_seed(0)
    out = random_crop(x, gen, 6, slice(None), 2)
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    shifts = set()
    for i in range(6):  # find the offset by search: an independent reading of the result
        found = [
            (dy, dx)
            for dy in range(5)
            for dx in range(5)
            if torch.equal(out[i], padded[i, :, dy : dy + 8, dx : dx + 8])
        ]
        assert len(found) == 1
        shifts.add(found[0])
    assert len(shifts) > 1


def test_augmented_batches_are_pure_in_seed_and_step_and_sliced_per_rank(cifar_folder, tmp_path):
    root, _ = cifar_folder
    plain = folder_dm(root, tmp_path, batch_size=6, augment=[])
    aug = folder_dm(root, tmp_path, batch_size=6, augment=["crop", "flip"], crop_padding=4)
    assert plain.cfg.augment == [] and aug.images is not None
    for step in (0, 1, 5):
        x, y = aug.train_batch(step)
        assert torch.equal(y, plain.train_batch(step)[1])  # the same images, augmented
        assert all(map(torch.equal, (x, y), aug.train_batch(step)))
        rows = aug.train_batch(step, 6, slice(2, 4))
        assert torch.equal(rows[0], x[2:4]) and torch.equal(rows[1], y[2:4])
    x0, x1 = aug.train_batch(0)[0], aug.train_batch(2)[0]  # two steps, same epoch slot order
    p0 = plain.train_batch(0)[0]
    assert not torch.equal(x0, p0)
    flipped = [
        torch.equal(x0[i], p0[i].flip(-1)) or not torch.equal(x0[i], p0[i]) for i in range(6)
    ]
    assert all(flipped) and not torch.equal(x0, x1)


def test_a_vit_trains_on_the_image_folder(
    cifar_folder, tmp_path, compose_cfg, tiny_run, one_thread
):
    import train

    root, _ = cifar_folder
    over = [o for o in tiny_run if not o.startswith(("model.block_size", "data.val_b"))]
    over += ["model=vit", "data=image_folder", f"data.path={root}", f"data.cache_dir={tmp_path}"]
    summary = train.run(compose_cfg([*over, "model.patch_size=8", f"run_dir={tmp_path / 'run'}"]))
    assert summary["status"] == "completed" and summary["steps"] == 3
    assert summary["final_val_acc"] is not None


def test_hf_image_decodes_pil_images_into_the_cache(monkeypatch, tmp_path):
    import datasets
    from PIL import Image

    import data.images

    def split(n: int, shift: int) -> datasets.Dataset:
        features = datasets.Features(
            {"img": datasets.Image(), "fine_label": datasets.ClassLabel(names=list("abcde"))}
        )
        pics = [Image.fromarray(p[:6, :6]) for p in pixels(n, shift)]
        labels = [i % 3 for i in range(n)]
        return datasets.Dataset.from_dict({"img": pics, "fine_label": labels}, features=features)

    splits = {"train": split(10, 1), "test": split(4, 20)}
    monkeypatch.setattr(data.images, "load_hub_dataset", lambda hf_id, c, name, fb: splits[name])
    cfg = ImageDataConfig("hf_image", hf_id="fake/rgb", image_column="img", cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"no column 'label'.*\['img', 'fine_label'\]"):
        ImageDataModule(cfg, 4, 0).setup()
    cfg.label_column = "fine_label"
    dm = ImageDataModule(cfg, 4, 0)
    dm.setup()
    assert (dm.image_size, dm.in_chans, dm.num_classes) == (6, 3, 5)  # classes from ClassLabel
    raw = torch.from_numpy(pixels(10, 1)[:, :6, :6]).permute(0, 3, 1, 2).double() / 255
    mean, std = raw.mean(dim=(0, 2, 3)), raw.std(dim=(0, 2, 3))
    torch.testing.assert_close(dm.mean.double(), mean, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(dm.std.double(), std, rtol=1e-6, atol=1e-6)
    x, y = val_images(dm)
    assert x.shape == (4, 3, 6, 6) and y.tolist() == [0, 1, 2, 0]
    test = torch.from_numpy(pixels(4, 20)[:, :6, :6]).permute(0, 3, 1, 2).float() / 255
    expected = (test - dm.mean[:, None, None]) / dm.std[:, None, None]
    torch.testing.assert_close(x, expected)
    cfg.image_size = 4
    small = ImageDataModule(cfg, 4, 0)
    small.setup()
    assert small.images.shape == (10, 3, 4, 4) and small.image_size == 4
