"""MFU: the FLOP count per token from the config (against a hand count), the device's peak (a
datasheet table on GPUs, a measured and cached matmul on CPUs), and the run's record of both."""

from __future__ import annotations

import json

import pytest

import train
import training.mfu as mfu
from models.gpt import GPT, GPTConfig
from runs.record import result_line


def test_flops_per_token_matches_a_hand_count():
    model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=8))
    # N without the 8 x 8 position table: tied embedding 88; block: two LayerNorms 2 x 16,
    # q, k, v, out 4 x (64 + 8), fc1 8 x 32 + 32, fc2 32 x 8 + 8; final LayerNorm 16.
    n = 88 + (2 * 16 + 4 * 72 + 288 + 264) + 16
    assert model.flops_per_unit() == 6 * n + 12 * 1 * 8 * 8 == 6624


def test_gpu_peaks_come_from_the_datasheet_table():
    assert mfu.gpu_peak("NVIDIA H200", "bf16-mixed") == 989e12
    assert mfu.gpu_peak("NVIDIA H100 PCIe", "16-mixed") == 756e12
    assert mfu.gpu_peak("NVIDIA A100-SXM4-80GB", "32-true") == 156e12  # TF32
    assert mfu.gpu_peak("Some Future GPU", "bf16-mixed") is None


def test_the_cpu_peak_is_measured_once_and_cached(tmp_path, monkeypatch):
    calls = []
    real = mfu.measure_gemm
    # a 256^3 product: the caching is under test, not the peak (a bf16 2048^3 product takes a
    # minute on a CPU without bf16 instructions, AVX2 only)
    small = lambda *a: calls.append(a) or real(*a, seconds=0.1, size=256)  # noqa: E731
    monkeypatch.setattr(mfu, "measure_gemm", small)
    first = mfu.cpu_peak(1, "32-true", tmp_path)
    assert mfu.cpu_peak(1, "32-true", tmp_path) == first and len(calls) == 1
    assert first > 1e8  # any CPU does 0.1 GFLOP/s on a 256^3 product
    mfu.cpu_peak(1, "bf16-mixed", tmp_path)  # another dtype: measured on its own
    assert len(calls) == 2 and len(json.loads((tmp_path / "cpu_peak.json").read_text())) == 2


def test_a_run_records_its_mfu_and_prints_it(
    tmp_path, tiny_run, compose_cfg, monkeypatch, one_thread
):
    monkeypatch.setenv("NORMLAB_CACHE", str(tmp_path / "cache"))
    summary = train.run(compose_cfg([*tiny_run, f"run_dir={tmp_path / 'run'}"]))
    assert summary["flops_per_token"] > 0 and summary["peak_flops"] > 0
    expected = summary["tokens_per_s"] * summary["flops_per_token"] / summary["peak_flops"]
    assert summary["mfu"] == pytest.approx(expected) and 0 < summary["mfu"] < 1
    line = result_line(summary)
    assert f"mfu={summary['mfu']:.1%}" in line and "tokens/s=" in line and "wall=" in line


def test_the_reference_losses_a_run_records(tmp_path, tiny_run, compose_cfg, one_thread):
    """The unigram loss of the train split's token frequencies (a text run) and chance (an
    image run): the loss of a model that learned nothing useful, drawn in the loss plots."""
    import math

    import numpy as np

    from data.text import unigram_entropy

    assert unigram_entropy(np.array([0, 0, 1, 2], np.uint16), 4) == pytest.approx(1.5 * math.log(2))
    gpt = train.run(compose_cfg([*tiny_run, f"run_dir={tmp_path / 'gpt'}"]))
    assert 2.5 < gpt["unigram_loss"] < 4.0  # pydocs' characters: ~3.25 nats
    vit = [o for o in tiny_run if not o.startswith(("model.block_size", "data.val_b"))]
    vit_summary = train.run(compose_cfg([*vit, "model=vit", f"run_dir={tmp_path / 'vit'}"]))
    assert vit_summary["chance_loss"] == pytest.approx(math.log(10))


def test_a_diverged_runs_line_says_where_and_why() -> None:
    summary = {"status": "diverged", "final_val_loss": None, "run_dir": "r", "wall_s": 3.0,
               "diverged_at_step": 41, "divergence_reason": "non-finite loss nan"}  # fmt: skip
    line = result_line(summary)
    assert "status=diverged (at step 41: non-finite loss nan) wall=3.0s" in line
    done = {**summary, "status": "completed", "final_val_loss": 2.0}
    assert "at step" not in result_line(done)
