"""The story of a run (analysis/cards.py): each instrument's first crossing of its documented
threshold, each guard's actions, the divergence and its reason, in step order; the heat maps
mark them where they happened."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis import cards, heatmaps, runs
from analysis.variants import Variant


def blown_up() -> runs.Run:
    """Layer 1's entropy collapses at step 20, layer 0's max logit passes 100 at 30 (4.9 -> 321
    -> 13,100), the grad norm jumps 10x at 40, skip_step acts at 41 and 43, the loss goes over
    3x its start at 45."""
    metrics = {
        "attn/entropy_min/layer_0": [(0, 3.0), (10, 2.5), (20, 1.0), (30, 0.5)],
        "attn/entropy_min/layer_1": [(0, 3.0), (10, 0.5), (20, 0.05), (30, 0.01)],
        "attn/max_logit/layer_0": [(0, 4.9), (10, 20.0), (20, 80.0), (30, 321.0), (40, 13100.0)],
        "attn/max_logit/layer_1": [(0, 4.0), (10, 9.0), (20, 30.0), (30, 99.0), (40, 250.0)],
        "grad_norm/total": [(s, 1.0 + 0.01 * s) for s in range(40)] + [(40, 20.0), (41, 50.0)],
        "guard/skipped_steps": [(41, 1.0), (43, 2.0)],
    }
    why = "loss 14.5 > 3.0 x initial 4.686"
    summary = {"status": "diverged", "seed": 0, "diverged_at_step": 45,
               "divergence_reason": why, "skipped_steps": 2}  # fmt: skip
    run = runs.Run(Path("run-0"), summary, {"optim.lr": 1.0}, metrics)
    run.params = runs.run_params(run)
    return run


def test_the_story_lists_first_crossings_guards_and_the_divergence_in_step_order() -> None:
    told = cards.story(blown_up())
    assert told == [
        (20, "head entropy < 0.1 (0.05, layer 1)"),
        (30, "attn logit > 100 (321, layer 0)"),
        (40, "grad norm x10 (20)"),
        (41, "skip_step skipped 2 step(s) (at 41, 43)"),
        (45, "diverged: loss 14.5 > 3.0 x initial 4.686"),
    ]
    row = cards.card(blown_up())
    assert row["outcome"] == "diverged" and row["story"].startswith("step 20: head entropy")


def test_each_crossing_rule_on_a_hand_made_series() -> None:
    above, below, jump, rises = (cards.Crossing("e", "m", rule, k, "s")
                                 for rule, k in (("above", 100), ("below", 0.1), ("jump", 10),
                                                 ("rises", 0)))  # fmt: skip
    assert cards.crossed(above, 100.5, None, []) and not cards.crossed(above, 100, None, [])
    assert cards.crossed(below, 0.09, None, []) and not cards.crossed(below, 0.1, None, [])
    assert not cards.crossed(jump, 100, 1, [1, 1])  # fewer than 3 earlier values: no median
    assert cards.crossed(jump, 10.1, 1, [1, 1, 1]) and not cards.crossed(jump, 10, 1, [1, 1, 1])
    even, odd = [1, 2, 3, 5], [1, 2, 3, 5, 9]  # medians 2.5 and 3: thresholds 25 and 30
    assert cards.crossed(jump, 25.1, 5, even) and not cards.crossed(jump, 25, 5, even)
    assert cards.crossed(jump, 30.1, 9, odd) and not cards.crossed(jump, 30, 9, odd)
    assert cards.crossed(rises, 1, None, []) and not cards.crossed(rises, 2, 2, [2])
    for c in cards.CROSSINGS:  # every threshold names where it comes from
        assert c.source and c.rule in ("above", "below", "jump", "rises")


def test_a_stalled_run_is_not_called_diverged() -> None:
    run = runs.Run(Path("r"), {"status": "completed", "steps": 200, "unigram_loss": 3.25,
                               "init_loss": 4.7, "final_val_loss": 3.26}, {}, {})  # fmt: skip
    run.params = runs.run_params(run)
    assert run.did_not_train
    assert cards.card(run)["outcome"] == "stalled"
    assert cards.story(run) == [(200, f"stalled: {run.did_not_train}")]


def test_the_heat_map_marks_the_divergence_and_the_first_crossing(tmp_path, monkeypatch) -> None:
    drawn = {}
    monkeypatch.setattr(heatmaps.xy, "save", lambda fig, out, name: drawn.setdefault(name, fig))
    run = blown_up()
    assert heatmaps.plot_heatmap([Variant(run.params, [run], "lr=1")], "attn/max_logit", tmp_path)
    ax = drawn["heat_max_logit.png"].axes[0]
    lines = [line.get_xydata().tolist() for line in ax.lines]
    assert [[45.0, 0.0], [45.0, 1.0]] in lines  # the divergence, a vertical line in axes units
    assert [[30.0, 0.0]] in lines  # the first crossing: step 30, layer 0
    assert [t for t in ax.get_yticks() if -0.5 <= t <= 1.5] == pytest.approx([0.0, 1.0])
