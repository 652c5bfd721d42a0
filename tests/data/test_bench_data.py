"""The data benchmark's pieces at a tiny size: the generated corpus, prepare and batch figures."""

from __future__ import annotations

import pytest

from scripts.bench import data as bench_data


def test_the_generated_corpus_is_seeded_pydocs_paragraphs(tmp_path):
    from pydoc_data.topics import topics

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    assert bench_data.write_corpus(a, 1) >= 2**20
    bench_data.write_corpus(b, 1)
    assert a.read_bytes() == b.read_bytes()  # seeded: the same corpus on every machine
    docs = "\n".join(topics.values())
    blocks = [b.strip() for b in a.read_text().split("\n\n")[:200] if b.strip()]
    assert all(b in docs for b in blocks)  # pieces of the docs, not in the docs' order
    assert "\n\n".join(blocks[:3]) not in docs


def test_prepare_and_batch_figures_agree_with_the_cache(tmp_path):
    corpus = tmp_path / "corpus.txt"
    bench_data.write_corpus(corpus, 1)
    prep = bench_data.bench_prepare(corpus, tmp_path / "cache", procs=1, vocab=300)
    assert prep["vocab_size"] == 300 and prep["dtype"] == "uint16"
    assert prep["token_files_mb"] == pytest.approx(prep["tokens"] * 2 / 2**20, abs=0.06)
    assert 0 < prep["tokens_per_byte"] < 1 and prep["bpe_train_s"] <= prep["prepare_s"]
    rows = bench_data.bench_batches(corpus, tmp_path / "cache", vocab=300, seconds=0.2)
    assert [(r["batch"], r["block"]) for r in rows] == list(bench_data.SHAPES)
    assert all(r["tokens_per_s"] > 0 and r["steps"] > 0 for r in rows)


@pytest.mark.slow
def test_peak_memory_of_a_train_py_child(tmp_path):
    over = ["trainer.max_steps=2", "trainer.val_check_interval=2", "optim.warmup_steps=1"]
    over += ["model.n_layer=1", "logger=csv", "num_threads=1", f"data.cache_dir={tmp_path}"]
    result = bench_data.peak_memory(over, tmp_path / "run")
    assert result["steps"] == 2 and 50 < result["peak_anon_mb"] <= result["peak_rss_mb"]
