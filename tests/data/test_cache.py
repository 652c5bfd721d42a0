"""The token cache: reuse, corrupt and half-built entries, racing jobs, a full disk, streaming."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import threading
import time
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest

import data.cache
import data.tokens
from data.cache import cache_root, entry_dir
from data.config import TextDataConfig
from data.text import TextDataModule
from data.tokens import cache_key, label

ROOT = Path(__file__).resolve().parents[2]
CFG = {"max_chars": 20_000}  # a small slice of pydocs


def setup_dm(cache: Path, **cfg) -> TextDataModule:
    dm = TextDataModule(TextDataConfig(cache_dir=str(cache), **{**CFG, **cfg}), 16, 2, 0)
    dm.setup()
    return dm


def count_builds(monkeypatch) -> list[int]:
    builds: list[int] = []
    real = data.tokens._build

    def counted(*args, **kwargs):
        builds.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(data.tokens, "_build", counted)
    return builds


def test_an_entry_is_built_once_and_then_read(tmp_path, monkeypatch):
    builds = count_builds(monkeypatch)
    first = setup_dm(tmp_path)
    second = setup_dm(tmp_path)
    assert builds == [1] and first.cache_path == second.cache_path
    assert sorted(p.name for p in first.cache_path.iterdir()) == [
        "meta.json",
        "train.bin",
        "val.bin",
        "vocab.json",
    ]  # the intermediate Arrow files are gone
    meta = json.loads((first.cache_path / "meta.json").read_text())
    assert meta["splits"]["train"]["tokens"] == len(first.train_tokens)
    assert meta["splits"]["val"]["chars"] + meta["splits"]["train"]["chars"] == 20_000
    assert (first.cache_path / "train.bin").stat().st_size == 2 * len(first.train_tokens)


@pytest.mark.parametrize(
    "damage",
    ["truncate", "extend", "drop_meta", "garble_meta", "other_fingerprint", "drop_file"],
)
def test_an_untrustworthy_entry_is_rebuilt_not_trained_on(tmp_path, monkeypatch, capsys, damage):
    good = setup_dm(tmp_path)
    expected = np.array(good.train_tokens)
    path = good.cache_path
    meta = json.loads((path / "meta.json").read_text())
    if damage == "truncate":  # a copy cut short, a disk that filled up
        with open(path / "train.bin", "r+b") as f:
            f.truncate(100)
    elif damage == "extend":
        with open(path / "train.bin", "ab") as f:
            f.write(b"\0\0")
    elif damage == "drop_meta":
        (path / "meta.json").unlink()
    elif damage == "garble_meta":
        (path / "meta.json").write_text("{not json")
    elif damage == "other_fingerprint":
        meta["fingerprint"]["split"]["val_fraction"] = 0.5
        (path / "meta.json").write_text(json.dumps(meta))
    else:
        (path / "val.bin").unlink()
    builds = count_builds(monkeypatch)
    again = setup_dm(tmp_path)
    assert builds == [1]
    assert "cannot be trusted" in capsys.readouterr().out
    assert np.array_equal(again.train_tokens, expected)


def test_a_build_killed_half_way_leaves_nothing_that_is_read(tmp_path, monkeypatch):
    def dies(self, values):
        raise KeyboardInterrupt  # the process dies mid-write

    with monkeypatch.context() as m:
        m.setattr(data.cache.ArrayWriter, "write", dies)
        with pytest.raises(KeyboardInterrupt):
            setup_dm(tmp_path)
    assert list((tmp_path / "text").iterdir()) == [next((tmp_path / "text").glob("*.lock"))]
    # A SIGKILL leaves its temporary directory: the next build removes it.
    cfg = TextDataConfig(cache_dir=str(tmp_path), **CFG)
    target = entry_dir(cache_root(cfg.cache_dir), "text", label(cfg), cache_key(cfg))
    stale = target.parent / f".{target.name}.tmp-999999"
    (stale / "train.bin").parent.mkdir()
    (stale / "train.bin").write_bytes(b"partial")
    dm = setup_dm(tmp_path)
    assert not stale.exists() and dm.cache_path == target


def test_racing_jobs_build_the_entry_once(tmp_path, monkeypatch):
    builds = count_builds(monkeypatch)
    real = data.tokens._build

    def slow(*args, **kwargs):  # hold the lock long enough for the other job to arrive
        time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(data.tokens, "_build", slow)
    results: list[TextDataModule] = []
    jobs = [threading.Thread(target=lambda: results.append(setup_dm(tmp_path))) for _ in range(2)]
    for job in jobs:
        job.start()
    for job in jobs:
        job.join()
    assert len(builds) <= 1 and len(results) == 2  # the waiting job found the finished entry
    assert np.array_equal(results[0].train_tokens, results[1].train_tokens)


@pytest.mark.slow
def test_racing_processes_share_one_entry(tmp_path):
    code = (
        "from data.config import TextDataConfig; from data.text import TextDataModule;"
        f"dm = TextDataModule(TextDataConfig(cache_dir={str(tmp_path)!r}, tokenizer='bpe', "
        "vocab_size=400), 16, 2, 0); dm.setup(); print(dm.cache_path, int(dm.train_tokens.sum()))"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300)[0].strip().splitlines()[-1] for p in procs]
    assert all(p.returncode == 0 for p in procs) and outs[0] == outs[1]
    assert len([p for p in (tmp_path / "text").iterdir() if p.is_dir()]) == 1


def test_a_full_disk_fails_in_one_line_and_leaves_no_partial_file(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    with monkeypatch.context() as m:  # too little room, seen before writing
        m.setattr(data.cache.shutil, "disk_usage", lambda p: usage(10**9, 10**9, 1000))
        with pytest.raises(ValueError, match=r"no room .*data.cache_dir=") as err:
            setup_dm(tmp_path)
    assert "\n" not in str(err.value)

    def full(self, values):  # the disk fills up while writing
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(data.cache.ArrayWriter, "write", full)
        with pytest.raises(ValueError, match=r"no room for the data cache in .*free space"):
            setup_dm(tmp_path)
    assert [p.suffix for p in (tmp_path / "text").iterdir()] == [".lock"]


# ---------------------------------------------------------------- streaming


DOCS = [f"story {i}: " + "once upon a time " * (i % 7 + 1) for i in range(400)]


@pytest.fixture
def fake_stream(monkeypatch):
    """hf_text streaming served by a local iterable dataset (the hub stays out of reach)."""
    import datasets

    import data.corpora

    def load(hf_id, hf_config, split, fallback, streaming=False):
        assert streaming
        return datasets.Dataset.from_dict({"story": DOCS}).to_iterable_dataset()

    monkeypatch.setattr(data.corpora, "load_hub_dataset", load)


def stream_dm(tmp_path, **cfg) -> TextDataModule:
    base = {"source": "hf_text", "hf_id": "local/stories", "text_column": "story"}
    cfg = TextDataConfig(streaming=True, cache_dir=str(tmp_path), **{**base, **cfg})
    dm = TextDataModule(cfg, 16, 4, 0)
    dm.setup()
    return dm


def test_streaming_keeps_max_tokens_and_splits_them(tmp_path, fake_stream):
    dm = stream_dm(tmp_path, tokenizer="bytes", max_tokens=5000, val_fraction=0.1)
    stream = "\n".join(DOCS).encode()[:5000]
    assert len(dm.train_tokens) == 4500 and len(dm.val_tokens) == 500
    assert (
        dm.train_tokens.tobytes()
        == np.frombuffer(stream[:4500], np.uint8).astype(np.uint16).tobytes()
    )
    assert dm.decode(dm.val_tokens) == stream[4500:].decode()


def test_streaming_bpe_learns_from_the_head_of_the_stream(tmp_path, fake_stream):
    dm = stream_dm(tmp_path, tokenizer="bpe", vocab_size=300, max_tokens=3000)
    assert dm.vocab_size == 300 and len(dm.train_tokens) + len(dm.val_tokens) == 3000
    assert "\n".join(DOCS).startswith(dm.decode(dm.train_tokens))


def test_streaming_errors_name_the_fix(tmp_path, fake_stream):
    with pytest.raises(ValueError, match="max_tokens"):
        stream_dm(tmp_path, tokenizer="bytes")
    with pytest.raises(ValueError, match="tokenizer=bpe or bytes"):
        stream_dm(tmp_path, max_tokens=1000)
    with pytest.raises(ValueError, match="fewer than one batch .*raise data.max_tokens"):
        stream_dm(tmp_path, tokenizer="bytes", max_tokens=60)  # 54 train < 4 x 17
    with pytest.raises(ValueError, match="no column 'text'.*story"):
        stream_dm(tmp_path, tokenizer="bytes", max_tokens=1000, text_column="text")
    with pytest.raises(ValueError, match="data=hf_text"):
        setup_dm(tmp_path, streaming=True, tokenizer="bytes", max_tokens=10)
