"""scripts/bench/probe_set.py at a tiny size: every default probe fires, and so does sharpness."""

from __future__ import annotations

import torch

from scripts.bench import probe_set


def test_bench_times_each_probe_callback_side_by_side(capsys):
    threads = torch.get_num_threads()
    args = "--n-layer 1 --n-embd 16 --n-head 2 --block-size 8 --batch-size 4 --blocks 2"
    try:
        result = probe_set.main([*args.split(), "--sharpness-every", "10", "--threads", "1"])
    finally:
        torch.set_num_threads(threads)
    assert len(result["blocks"][False]) == len(result["blocks"][True]) == 2
    assert result["plain_s"] > 0 and result["probed_s"] > 0
    timed = set(result["per_callback_s"])
    assert {"GradNormProbe", "ForwardProbes", "UpdateRatio", "LossSpikes", "Sharpness"} <= timed
    assert "overhead ratio probed/plain" in capsys.readouterr().out


def test_bench_times_each_instrument_alone_per_firing(capsys):
    threads = torch.get_num_threads()
    args = "--n-layer 1 --n-embd 16 --n-head 2 --block-size 8 --batch-size 4 --blocks 2 --each"
    names = "attn_sink,layer_drop,adam_state,spike_score"
    try:
        result = probe_set.main([*args.split(), "--probes", names, "--threads", "1"])
    finally:
        torch.set_num_threads(threads)
    assert set(result["per_callback_s"]) == set(names.split(","))
    assert all(s > 0 for s in result["per_callback_s"].values())
    assert "ms a firing; every  10 steps by default" in capsys.readouterr().out
