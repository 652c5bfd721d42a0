"""Hub access: offline and unreachable hubs fail in seconds with one line naming the fix."""

from __future__ import annotations

import socket
import time

import pytest

import data.hub as hub_mod
from data.config import ImageDataConfig, TextDataConfig
from data.text import TextDataModule
from data.vision import ImageDataModule


def fails_fast(make, error: type, match: str, seconds: float = 5.0) -> None:
    start = time.perf_counter()
    with pytest.raises(error, match=match) as err:
        make().setup()
    assert time.perf_counter() - start < seconds
    assert "\n" not in str(err.value)


def test_hf_text_offline_fails_fast(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = TextDataConfig("hf_text", hf_id="roneneldan/TinyStories", cache_dir=str(tmp_path))
    fails_fast(lambda: TextDataModule(cfg, 8, 2, 0), ConnectionError, "HF_HUB_OFFLINE.*text_files")
    cfg.streaming, cfg.tokenizer, cfg.max_tokens = True, "bytes", 10_000  # a stream: no cache
    fails_fast(lambda: TextDataModule(cfg, 8, 2, 0), ConnectionError, "HF_HUB_OFFLINE.*go online")


def test_a_hub_tokenizer_offline_fails_fast(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = TextDataConfig(tokenizer="normlab/none", max_chars=5000, cache_dir=str(tmp_path))
    fails_fast(
        lambda: TextDataModule(cfg, 8, 2, 0),
        ConnectionError,
        r"tokenizer='normlab/none' is not char, bytes or bpe.*HF_HUB_OFFLINE is set.*go online",
    )
    assert not list((tmp_path / "text").glob("*/"))


def test_hub_unreachable_fails_fast(monkeypatch, tmp_path):
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: refused at once
    cfg = TextDataConfig("hf_text", hf_id="x/y", cache_dir=str(tmp_path))
    fails_fast(lambda: TextDataModule(cfg, 8, 2, 0), ConnectionError, "cannot reach 127.0.0.1")

    def hang(*args, **kwargs):  # a blackholed network: connect times out long after our limit
        time.sleep(3)
        raise OSError("timed out")

    monkeypatch.setattr(socket, "create_connection", hang)
    monkeypatch.setattr(hub_mod, "HUB_TIMEOUT_S", 0.2)
    image = ImageDataConfig("hf_image", hf_id="ylecun/mnist", cache_dir=str(tmp_path))
    fails_fast(lambda: ImageDataModule(image, 8, 0), ConnectionError, "data=digits", 1.5)
    bpe = TextDataConfig(tokenizer="gpt2", max_chars=5000, cache_dir=str(tmp_path))
    fails_fast(lambda: TextDataModule(bpe, 8, 2, 0), ConnectionError, "data.tokenizer=bpe", 1.5)
