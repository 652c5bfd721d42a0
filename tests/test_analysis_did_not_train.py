"""A run that completes on the unigram (or chance) plateau, or above its initial loss, "did not
train": summary.json says so, and the report's tables, warnings, LR-sensitivity ranking, plots
and wandb table show it, never as the least sensitive variant."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from analysis.wandb_report import lr_table
from runs.record import PLATEAU_MARGIN, did_not_train
from scripts import compare

UNIGRAM = 3.26


@pytest.mark.parametrize(
    ("summary", "why"),
    [
        ({"final_val_loss": 3.20, "unigram_loss": UNIGRAM}, "within 0.1 of the unigram loss"),
        ({"final_val_loss": 3.15, "unigram_loss": UNIGRAM}, None),  # 0.11 below: it trained
        ({"final_val_loss": 2.25, "chance_loss": 2.302585}, "within 0.1 of the chance loss"),
        ({"final_val_loss": 4.1, "init_loss": 4.0}, "above its initial loss 4.000"),
        ({"final_val_loss": 3.9, "init_loss": 4.0}, None),
        ({"final_val_loss": None, "unigram_loss": UNIGRAM}, None),  # no loss: nothing to judge
    ],
)
def test_did_not_train_against_hand_made_summaries(summary, why):
    got = did_not_train({"status": "completed", **summary})
    assert (got is None) == (why is None) and (why is None or why in got)


def test_only_a_completed_run_can_have_not_trained():
    stalled = {"final_val_loss": 3.25, "unigram_loss": UNIGRAM}
    assert did_not_train({"status": "diverged", **stalled}) is None
    assert did_not_train({"status": "completed", **stalled}) is not None
    assert PLATEAU_MARGIN == 0.1


# (placement, lr) -> final val loss per seed: post never leaves the plateau, so its curve is flat
LOSSES = {
    ("pre", 1e-3): [2.0, 2.1],
    ("pre", 3e-3): [1.8, 1.9],
    ("pre", 1e-2): [2.4, 2.6],
    ("post", 1e-3): [3.25, 3.26],
    ("post", 3e-3): [3.24, 3.25],
    ("post", 1e-2): [3.25, 3.27],
}


def write_sweep(root: Path, with_field: bool) -> Path:
    """The sweep's run dirs; ``with_field``: summary.json records did_not_train (as train.py
    writes it now), else the reader judges the older record from its fields."""
    for (placement, lr), losses in LOSSES.items():
        for seed, loss in enumerate(losses):
            run = root / f"lr={lr},placement={placement},seed={seed}"
            (run / ".hydra").mkdir(parents=True)
            (run / ".hydra/config.yaml").write_text(
                f"seed: {seed}\nmodel: {{name: gpt, n_layer: 2}}\nplacement: {{name: {placement}}}"
                f"\nnorm: {{name: layernorm}}\noptim: {{lr: {lr}}}\n"
            )
            (run / "metrics.csv").write_text("step,train/loss,val/loss\n0,4.2,\n10,3.5,\n")
            summary = {"status": "completed", "placement": placement, "lr": lr, "seed": seed,
                       "final_val_loss": loss, "unigram_loss": UNIGRAM}  # fmt: skip
            if with_field:
                summary["did_not_train"] = did_not_train(summary)
            (run / "summary.json").write_text(json.dumps(summary))
    return root


@pytest.mark.parametrize("with_field", [True, False])
def test_a_stalled_arm_is_marked_everywhere_the_report_shows_it(tmp_path, with_field):
    root = write_sweep(tmp_path / "sweep", with_field)
    out = tmp_path / "report"
    assert compare.main([str(root), "--out", str(out), "--no-wandb"]) == 0
    report = json.loads((out / "report.json").read_text())
    by = {e["variant"]["placement"]: e for e in report["lr_sweep"]}
    post, pre = by["post"], by["pre"]
    assert post["did_not_train"] is True and pre["did_not_train"] is False
    assert post["lr_sensitivity"] < pre["lr_sensitivity"]  # flat: it learned nothing anywhere
    md = (out / "report.md").read_text()
    lr_rows = [line for line in md.splitlines() if re.match(r"\| (\d+|–) \| placement=", line)]
    assert lr_rows[0].startswith("| 1 | placement=pre ") and "| stalled |" in lr_rows[-1]
    assert lr_rows[-1].startswith("| – | placement=post ")  # unranked, after the rest
    stalled = [r for r in report["variants"] if r["params"]["placement"] == "post"]
    assert all(len(r["did_not_train"]) == 2 for r in stalled)
    assert "2 DID NOT TRAIN" in md and "completed" not in md.split("2 DID NOT TRAIN")[0][-25:]
    assert sum("did not train" in w for w in report["warnings"]) == 3  # one per stalled variant
    assert "did not train" in (out / "report.html").read_text()
    columns, rows = lr_table(report["lr_sweep"])
    table = {r[0]: dict(zip(columns, r, strict=True)) for r in rows}
    assert table["placement=post"]["lr_sensitivity"] is None
    assert table["placement=post"]["did_not_train"] is True
    run = report["variants"][0]["runs"][0]
    assert "did_not_train" in run
