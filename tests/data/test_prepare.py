"""python -m scripts.prepare: the entry a later run reads, and one line for a bad setting."""

from __future__ import annotations

import data.tokens
from data.config import TextDataConfig
from data.text import TextDataModule
from scripts import prepare


def test_prepare_builds_the_entry_a_run_then_reads(tmp_path, capsys, monkeypatch):
    over = ["data.tokenizer=bpe", "data.vocab_size=300", f"data.cache_dir={tmp_path}"]
    assert prepare.main(over) == 0
    out = capsys.readouterr().out
    assert "train: " in out and "vocab: 300 ids (bpe)" in out and str(tmp_path) in out

    def no_build(*args, **kwargs):
        raise AssertionError("the prepared entry should have been found")

    monkeypatch.setattr(data.tokens, "_build", no_build)
    cfg = TextDataConfig(tokenizer="bpe", vocab_size=300, cache_dir=str(tmp_path))
    dm = TextDataModule(cfg, 16, 4, 0)
    dm.setup()
    assert dm.vocab_size == 300


def test_prepare_fails_in_one_line(tmp_path, capsys):
    assert prepare.main(["data.tokenizer=bpe", "data.vocab_size=10"]) == 1
    assert prepare.main(["data=nope"]) == 1
    assert prepare.main(["data=image_folder", f"data.path={tmp_path / 'none'}"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("error: ") for line in lines)
    assert "vocab_size >= 256" in lines[0] and "is not a directory" in lines[2]
