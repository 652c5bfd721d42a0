"""Verdicts that cannot pool the wrong runs: a seed counts once, runs with other settings are a
variant of their own, a variant mixing code is said, a run without validation is no data, an
arm's seeds never choose a best rate, what reaches markdown cannot break it, and reproduce's
command line takes what it is given as one value, in any order (docs/reliability.md's table
names each test)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from analysis.lr_sweep import lr_curve
from analysis.report import write_report
from analysis.runs import load_runs
from analysis.variants import group_variants
from experiments import reproduce
from tests.helpers import F2_SMALL, f2_runs, settings_run


# --- which runs a variant pools ------------------------------------------------------------------
def test_a_copy_or_a_rerun_of_a_seed_counts_once(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    settings_run(sweep, "seed=0", 0, 2.0)
    settings_run(sweep, "seed=1", 1, 2.2)
    rerun = settings_run(sweep, "model.n_head=4,seed=0", 0, 2.0)  # extended by a restated default
    os.utime(rerun / "summary.json", (2e9, 2e9))  # it ran after the sweep's own
    shutil.copytree(sweep / "seed=1", sweep / "backup" / "seed=1")  # a backup inside the sweep
    report = write_report(sweep, plots=False)
    (only,) = report["variants"]
    assert [r["seed"] for r in only["runs"]] == [0, 1] and only["best_val_loss"]["n"] == 2
    left = "\n".join(report["left_out"])
    assert "backup/seed=1: the same settings and seed 1 as" in left
    assert "model.n_head=4,seed=0: the same settings and seed 0" in left
    assert "counts once" in (sweep / "report" / "report.md").read_text()


def test_a_finished_repeat_of_a_seed_is_kept_over_a_failed_one(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    failed = settings_run(sweep, "seed=0", 0, 2.0)
    summary = json.loads((failed / "summary.json").read_text())
    (failed / "summary.json").write_text(json.dumps({**summary, "status": "failed"}))
    settings_run(sweep, "rerun,seed=0", 0, 2.1)
    (only,) = write_report(sweep, plots=False)["variants"]
    assert [(r["seed"], r["status"]) for r in only["runs"]] == [(0, "completed")]


def test_a_run_with_other_settings_is_a_variant_of_its_own_never_another_seed(tmp_path):
    sweep = tmp_path / "sweep"
    settings_run(sweep, "seed=0", 0, 2.0)
    settings_run(sweep, "seed=1", 1, 2.2)
    settings_run(sweep, "seed=2", 2, 1.1, **{"trainer.max_steps": 300})
    settings_run(sweep, "seed=3", 3, 2.1, **{"data.batch_size": 64})
    report = write_report(sweep, plots=False)
    assert "trainer.max_steps" in report["variant_fields"]
    assert "data.batch_size" in report["variant_fields"]
    seeds = sorted(tuple(r["seed"] for r in v["runs"]) for v in report["variants"])
    assert seeds == [(0, 1), (2,), (3,)]
    assert any("max_steps=300" in v["label"] for v in report["variants"])
    assert any("trainer.max_steps differs between runs of one variant (30, 300)" in w
               for w in report["left_out"])  # fmt: skip


def test_a_variant_whose_runs_ran_different_code_says_so(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    settings_run(sweep, "seed=0", 0, 2.0, code="aaa")
    settings_run(sweep, "seed=1", 1, 2.2, code="bbb")
    report = write_report(sweep, plots=False)
    assert len(report["variants"]) == 1 and len(report["variants"][0]["runs"]) == 2
    assert any("ran different code (code_version aaa, bbb)" in w for w in report["warnings"])


def test_train_records_the_code_version() -> None:
    from runs.summary import FIELDS
    from training.attempt import code_version

    assert "code_version" in FIELDS and len(code_version()) == 12


# --- runs without a result, seeds that never choose ---------------------------------------------
def test_a_completed_run_without_validation_is_no_data_never_a_divergence(tmp_path, monkeypatch):
    """F2's Pre-LN with warmup completed both seeds with validation off: no loss to pair, so F2b
    is NO DATA (never a PASS or FAIL on a missing value), and neither run counts as diverged."""
    out = tmp_path / "f2"
    f2_runs(out, F2_SMALL, set())
    for run in out.glob("*optim.warmup_steps=100,placement=pre,*"):
        (run / "summary.json").write_text(json.dumps({"status": "completed"}))
    monkeypatch.setattr(reproduce, "run_sweep", lambda *a: pytest.fail("launched"))
    assert reproduce.main(["f2", "--out", str(out), *F2_SMALL]) == 0
    record = json.loads((out / "verdict.json").read_text())
    claims = {c["id"]: c for c in record["claims"]}
    assert claims["F2b"]["status"] == "NO DATA", claims["F2b"]
    assert "0 seeds ran in both arms" in claims["F2b"]["note"]
    assert record["run_status"] == {"completed": 8}
    unvalidated = [r for r in record["table"]["rows"] if r["values"]["best_val_loss"] is None]
    assert len(unvalidated) == 2 and {r["outcome"] for r in unvalidated} == {"trained"}


def test_an_arms_seeds_never_enter_the_best_rate_choice(tmp_path: Path) -> None:
    """The report's lr curve: seeds 0 and 1 ran at both rates (the grid); seed 2 ran at 3e-3
    only (an arm's or a confirming seed) with a far lower loss. The best rate stays the grid's,
    and seed 2 is no point of the curve."""
    sweep = tmp_path / "sweep"
    for seed, lr, loss in [(0, 1e-3, 2.0), (1, 1e-3, 2.0), (0, 3e-3, 2.1), (1, 3e-3, 2.1),
                           (2, 3e-3, 0.5)]:  # fmt: skip
        settings_run(sweep, f"optim.lr={lr},seed={seed}", seed, loss, **{"optim.lr": lr})
    runs, _ = load_runs(sweep)
    variants = group_variants(runs, ["lr"])
    curve = lr_curve(variants)
    assert curve["best_lr"] == 1e-3 and curve["best_val_loss"] == 2.0
    assert [p["n"] for p in curve["points"]] == [2, 2]
    assert "confirm" not in curve  # no seed ran at 1e-3 alone


# --- markdown and the command line ---------------------------------------------------------------
def test_a_group_name_cannot_break_report_md(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for seed in (0, 1):
        run = settings_run(sweep, f"seed={seed}", seed, 2.0)
        summary = json.loads((run / "summary.json").read_text())
        summary["wandb_group"] = "g`x\n# injected <b>bold</b> | cell"
        (run / "summary.json").write_text(json.dumps(summary))
    write_report(sweep, plots=False)
    text = (sweep / "report" / "report.md").read_text()
    assert "\n# injected" not in text and "``g`x # injected <b>bold</b> | cell``" in text


@pytest.mark.parametrize("path", ["/home/josé/runs, new/日本", "/tmp/it's", "/tmp/a=b"])
def test_the_sweep_dir_reaches_hydra_as_one_value(path: str) -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from experiments.sweep import hydra_quoted

    (override,) = OverridesParser.create().parse_overrides(
        [f"hydra.sweep.dir={hydra_quoted(path)}"]
    )
    assert override.value() == path and not override.is_sweep_override()


def test_reproduce_takes_its_own_sweep_with_the_values_in_another_order(tmp_path, monkeypatch):
    out = tmp_path / "f2"
    f2_runs(out, F2_SMALL, set())
    monkeypatch.setattr(reproduce, "run_sweep", lambda *a: pytest.fail("launched"))
    assert reproduce.main(["f2", "--out", str(out), "optim.lr=1e-3", "seed=0,1"]) == 0
    assert reproduce.main(["f2", "--out", str(out), "seed=1,0", "optim.lr=1e-3"]) == 0


def test_reproduce_on_a_busy_sweep_dir_names_the_holder(tmp_path, monkeypatch, capsys) -> None:
    from runs.dirlock import RunDirLock

    out = tmp_path / "f2"
    f2_runs(out, F2_SMALL, {("pre", 100)})
    lock = RunDirLock(out, "sweep dir")
    lock.acquire()
    monkeypatch.setattr(reproduce, "run_sweep", lambda *a: pytest.fail("launched"))
    try:
        assert reproduce.main(["f2", "--out", str(out), *F2_SMALL]) == 1
    finally:
        lock.release()
    assert f"being written by another process (PID {os.getpid()})" in capsys.readouterr().out


def test_a_value_the_experiment_has_no_entry_for_is_one_line(tmp_path, capsys) -> None:
    code = reproduce.main(["f7", "data.batch_size=5", "--dry-run", "--out", str(tmp_path / "f7")])
    out = capsys.readouterr().out
    assert code == 1 and "error: InterpolationKeyError" in out and "at_batch.5" in out
    assert "Traceback" not in out
