"""The benchmark script: quick mode end to end, and the equivalences its ratios rest on."""

from __future__ import annotations

import json
import math

import pytest
import torch

from models.norms import RMSNorm
from scripts.bench import cli, core, plain_gpt
from scripts.bench import models as bench_models


@pytest.mark.slow  # 16 s; fast versions: the section, ratio and configuration tests below
def test_quick_mode_runs_every_section(tmp_path):
    out = tmp_path / "bench.json"
    report = cli.main(["--quick", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    results = report["results"]
    errors = [r for r in results if r["status"] == "error"]
    assert not errors, errors
    measured = [r for r in results if r["status"] == "ok"]
    for r in measured:
        assert math.isfinite(r["value"]) and r["value"] > 0, r
        for key in ("ratio", "best"):
            assert r[key] is None or (math.isfinite(r[key]) and r[key] > 0), r
    sections = {r["section"] for r in measured}
    assert {"norms", "placements", "memory", "probes"} <= sections
    probes = {r["name"] for r in measured if r["section"] == "probes"}
    assert {"plain step", "probed step", "GradNormProbe"} <= probes  # and each callback's time
    assert report["ok"]
    # Every placement x norm is either measured or refused with a reason.
    grid = [r for r in results if r["section"] == "placements"]
    assert any(r["name"] == "pre/layernorm" and r["ratio"] == 1.0 for r in grid)
    assert all(r["status"] == "ok" or r["note"].startswith("refused") for r in grid)
    gpt = [r for r in results if r["section"] == "gpt"]
    try:
        import transformers  # noqa: F401
    except ImportError:
        assert [r["status"] for r in gpt] == ["skipped"]
    else:
        names = {r["name"] for r in gpt if r["status"] == "ok"}
        assert {
            f"{m}{suffix}"
            for m in ("normlab", "plain_gpt", "hf_gpt2")
            for suffix in bench_models.GPT_PAIRS
        } <= names


def test_only_rejects_an_unknown_section(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--quick", "--only", "gpt,nope"])
    assert "choose from gpt, variants, vit" in capsys.readouterr().err


def test_interleaved_alternates_contenders():
    calls = []
    fns = {name: (lambda name=name: calls.append(name)) for name in "ab"}
    times = core.interleaved(fns, core.BenchConfig(reps=3, iters=2))
    assert calls == ["a", "a", "b", "b"] * 3
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3}


def test_speed_results_ratio_is_baseline_time_over_time():
    times = {"fast": [1.0, 2.0, 3.0], "base": [4.0, 6.0, 8.0]}
    by_name = {r.name: r for r in core.speed_results("s", times, "base", 10, "tok/s", "")}
    assert by_name["fast"].value == pytest.approx(10 / 2.0)
    assert by_name["fast"].ratio == pytest.approx(6.0 / 2.0)
    assert by_name["fast"].best == pytest.approx(4.0 / 1.0)
    assert by_name["base"].ratio == 1.0


@pytest.mark.parametrize("reference", sorted(bench_models.EXTRA_NORMS))
def test_reference_rmsnorms_match_normlab_rmsnorm_and_its_gradients(reference):
    torch.manual_seed(0)
    x, grad = torch.randn(3, 5, 16, dtype=torch.float64), torch.randn(3, 5, 16, dtype=torch.float64)
    ref, ours = bench_models.EXTRA_NORMS[reference](16).double(), RMSNorm(16).double()
    with torch.no_grad():
        ref.weight.copy_(torch.randn(16))
        ours.weight.copy_(ref.weight)
    outs = []
    for norm in (ref, ours):
        xi = x.clone().requires_grad_()
        y = norm(xi)
        y.backward(grad)
        outs.append((y, xi.grad, norm.weight.grad))
    for a, b in zip(*outs, strict=True):
        torch.testing.assert_close(a, b)


def expected_gpt2_params(s: core.LMSize) -> int:
    """Hand count: token and position tables, per layer 2 LNs + qkv + out + MLP, final LN."""
    d = s.n_embd
    per_layer = (
        2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d)
    )
    return s.vocab_size * d + s.block_size * d + s.n_layer * per_layer + 2 * d


@pytest.mark.parametrize("ours_act,hf_act", list(bench_models.GPT_PAIRS.values()))
@pytest.mark.parametrize("size", ["quick", "cpu"])
def test_gpt_and_hf_gpt2_have_identical_configuration(size, ours_act, hf_act):
    pytest.importorskip("transformers")
    s = core.GPT_SIZES[size]
    torch.manual_seed(0)
    ours, hf = bench_models.normlab_gpt(s, activation=ours_act), bench_models.hf_gpt2(s, hf_act)
    a, b = bench_models.describe_gpt(ours), bench_models.describe_hf_gpt2(hf)
    assert a == b
    assert a["params"] == expected_gpt2_params(s)
    assert hf.config.activation_function == hf_act and hf.config._attn_implementation == "sdpa"
    if size == "quick":  # same weights -> same logits: the two compute one function
        bench_models.copy_gpt_to_hf(ours, hf)
        idx = torch.randint(0, s.vocab_size, (2, s.block_size))
        with torch.no_grad():
            torch.testing.assert_close(ours(idx)[0], hf(input_ids=idx).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh"])
def test_plain_gpt_has_the_configuration_and_computes_the_same_loss_and_gradients(activation):
    s = core.GPT_SIZES["quick"]
    torch.manual_seed(0)
    ours = bench_models.normlab_gpt(s, activation=activation)
    plain = plain_gpt.plain_like(ours)
    a = bench_models.describe_gpt(ours)
    assert a == plain_gpt.describe_plain(plain) and a["params"] == expected_gpt2_params(s)
    idx = torch.randint(0, s.vocab_size, (2, s.block_size))
    ours_loss, plain_loss = ours(idx, idx)[1], plain(idx, idx)
    torch.testing.assert_close(ours_loss, plain_loss)
    ours_loss.backward(), plain_loss.backward()
    torch.testing.assert_close(ours.blocks[0].mlp.fc1.weight.grad, plain.blocks[0].fc.weight.grad)
    torch.testing.assert_close(ours.tok_emb.weight.grad, plain.wte.weight.grad)


def test_configuration_check_catches_a_difference():
    pytest.importorskip("transformers")
    s = core.GPT_SIZES["quick"]
    hf = bench_models.hf_gpt2(s, "gelu_new")  # the tanh form, against normlab's exact default
    with pytest.raises(RuntimeError, match="gelu"):
        core.check_same(
            bench_models.describe_gpt(bench_models.normlab_gpt(s)),
            bench_models.describe_hf_gpt2(hf),
            "x",
        )


def test_flops_per_token_counts_matmuls_of_one_token():
    s = core.LMSize(n_layer=2, n_head=2, n_embd=8, block_size=4, vocab_size=10, batch_size=1)
    m = bench_models.normlab_gpt(s)
    d, L, T = 8, 2, 4
    n = 10 * d + L * (12 * d * d + 13 * d) + 2 * d  # parameters without the position table
    assert bench_models.flops_per_token(m) == 6 * n + 12 * L * T * d


def test_round_ratios_pair_each_round_and_report_their_spread():
    times = {"ours": [1.0, 2.0, 1.0], "other": [2.0, 3.0, 1.5]}  # ratios 2, 1.5, 1.5
    r = core.pair_result("s", times, "ours", "other")
    assert r.name == "ours / other" and r.unit == "x"
    assert r.value == pytest.approx(1.5)
    assert r.spread == pytest.approx((1.5, 2.0))
    by_name = {x.name: x for x in core.speed_results("s", times, "other", 1, "tok/s", "")}
    assert by_name["ours"].spread == pytest.approx((1.5, 2.0))
    assert by_name["other"].spread == (1.0, 1.0)


def test_threads_and_modes_parse_and_refuse_bad_values(capsys):
    assert cli.parse_threads("1,2") == [1, 2]
    assert cli.parse_modes("eager,compiled") == (False, True)
    for bad in (["--threads", "0"], ["--threads", "x"], ["--modes", "jit"]):
        with pytest.raises(SystemExit):
            cli.main(["--quick", "--only", "norms", *bad])
    assert "--modes takes eager, compiled or both" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["--quick", "--only", "norms", "--threads", "1,2", "--clock", "cpu"])


def test_sections_run_once_per_thread_count():
    report = cli.main(["--quick", "--only", "norms", "--threads", "1,2", "--clock", "auto"])
    threads = {r["threads"] for r in report["results"]}
    assert threads == {1, 2} and report["meta"]["threads"] == [1, 2]
    assert torch.get_num_threads() == report["meta"]["threads_before"]


def test_one_bench_command_runs_each_tool_by_name():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "scripts.bench", "probe_set", "--help"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.startswith("usage: python -m scripts.bench probe_set")
