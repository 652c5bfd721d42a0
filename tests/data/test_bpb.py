"""val/bpb, bits per UTF-8 byte, and train.py on every tokenizer, offline."""

from __future__ import annotations

import json
import math

import lightning.pytorch as L
import pytest
import torch
import torch.nn.functional as F

from data.config import TextDataConfig
from data.corpora import load_text
from data.text import TextDataModule
from data.tokenizer import load_vocab
from models.gpt import GPT, GPTConfig
from training.task import LanguageModelTask, OptimConfig


@pytest.mark.filterwarnings("ignore:.*does not have many workers")
def test_val_bpb_is_the_val_nats_over_the_bytes_they_spell(tmp_path, one_thread):
    dm = TextDataModule(TextDataConfig(max_chars=30_000, cache_dir=str(tmp_path)), 16, 4, 0)
    dm.setup()
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=dm.vocab_size, n_layer=1, n_head=2, n_embd=32, block_size=16))
    task = LanguageModelTask(model, OptimConfig(), total_steps=1)
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.validate(task, datamodule=dm, verbose=False)
    nats = n_bytes = 0.0
    with torch.no_grad():
        for x, y in dm.val_dataloader():
            logits, _ = model(x, y)
            nats += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
            n_bytes += sum(len(dm.decode(row).encode("utf-8")) for row in y)
    # Chars unseen in train decode as the unknown char, not as themselves: the bytes are scaled
    # to the val text's own UTF-8 bytes (the last 10% of the corpus's chars).
    text = load_text(dm.cfg)
    text_bytes = len(text[len(text) - int(len(text) * 0.1) :].encode())
    decoded = len(dm.decode(dm.val_tokens).encode())
    assert dm.lossy_tokenizer and decoded != text_bytes
    n_bytes *= text_bytes / decoded
    bpb = trainer.callback_metrics["val/bpb"].item()
    assert bpb == pytest.approx(nats / (math.log(2) * n_bytes), rel=1e-5)
    assert task.results()["final_val_bpb"] == pytest.approx(bpb)


@pytest.mark.parametrize("tokenizer", ["bytes", "bpe"])
def test_train_py_trains_offline_on_bytes_and_bpe(
    tokenizer, tmp_path, compose_cfg, tiny_run, one_thread
):
    import train

    over = [*tiny_run, f"data.tokenizer={tokenizer}", "data.vocab_size=1024"]
    over += [f"data.cache_dir={tmp_path / 'cache'}", f"run_dir={tmp_path / 'run'}"]
    summary = train.run(compose_cfg(over))
    assert summary["status"] == "completed" and summary["final_val_bpb"] is not None
    if tokenizer == "bytes":  # one byte per token: bits per byte are nats per token / ln 2
        assert summary["final_val_bpb"] == pytest.approx(summary["final_val_loss"] / math.log(2))
    assert summary["best_val_bpb"] <= summary["final_val_bpb"]
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["final_val_bpb"] == summary["final_val_bpb"]
    vocab = load_vocab(tmp_path / "run" / "vocab.json")
    assert vocab.vocab_size == (256 if tokenizer == "bytes" else 1024)
    assert vocab.decode(vocab.encode("def f(x): return x")) == "def f(x): return x"
