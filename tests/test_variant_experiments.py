"""The experiments on the newer variants (F6 QK-norm and LR sensitivity, F7 batch statistics, the
placement depth study): their configs compose at both sizes with the sweeps they promise, and
their claims decide reports with known numbers right."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts import reproduce
from scripts.analysis.findings import Verdict, evaluate
from scripts.analysis.findings.lr import sensitivity
from tests.reports import seed_runs

PLACEMENTS = ["post", "pre", "deepnorm", "sandwich", "mix", "b2t", "rezero"]


def swept(experiment: str) -> tuple[object, list[list[str]], dict[str, list[str]]]:
    cfg = reproduce.compose(experiment, [])
    jobs = reproduce.sweep_jobs(cfg, [])
    for job in (jobs[0], jobs[-1]):  # a typo in a swept key or option fails here
        reproduce.compose(experiment, job)
    return cfg, jobs, reproduce.swept_values(jobs)


# --- configs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", ["", "_gpu"])
def test_f6_sweeps_learning_rates_and_qk_norm(size: str) -> None:
    cfg, jobs, values = swept(f"f6_lr_sensitivity{size}")
    lrs = sorted(float(x) for x in values["optim.lr"])
    assert len(lrs) >= 4 and lrs[0] <= 1e-3 and lrs[-1] >= 1e-1
    ratios = [b / a for a, b in zip(lrs, lrs[1:], strict=False)]
    assert max(ratios) / min(ratios) < 1.5  # log-spaced
    assert sorted(x.lower() for x in values["model.qk_norm"]) == ["false", "true"]
    assert len(values["seed"]) >= 2
    assert "max_logit" in cfg.probes.enabled and cfg.placement.name == "pre"
    assert len(jobs) == len(lrs) * 2 * len(values["seed"])
    assert cfg.trainer.accelerator == ("gpu" if size else "cpu")


@pytest.mark.parametrize("size", ["", "_gpu"])
def test_f7_sweeps_norms_and_batch_sizes_at_equal_epochs(size: str) -> None:
    experiment = f"f7_batch_stats{size}"
    cfg, _, values = swept(experiment)
    assert sorted(values["norm"]) == ["batchnorm", "layernorm", "rmsnorm"]
    assert sorted(map(int, values["data.batch_size"])) == [4, 16, 64]
    assert len(values["seed"]) >= 2 and cfg.model.name == "vit"
    images, evals = set(), set()
    for batch in values["data.batch_size"]:
        run = reproduce.compose(experiment, [f"data.batch_size={batch}"])
        images.add(run.trainer.max_steps * int(batch))
        evals.add(round(run.trainer.max_steps / run.trainer.val_check_interval))
    assert len(images) == 1, f"images seen differ across batch sizes: {images}"
    assert evals == {10}  # as many validations at every batch size: "best" is comparable
    with pytest.raises(Exception, match="at_batch"):  # a batch size without a table entry
        _ = reproduce.compose(experiment, ["data.batch_size=5"]).trainer.max_steps


@pytest.mark.parametrize("size", ["", "_gpu"])
def test_placement_study_covers_every_placement(size: str) -> None:
    cfg, _, values = swept(f"placements_depth{size}")
    assert sorted(values["placement"]) == sorted(PLACEMENTS)
    assert len(values["model.n_layer"]) >= 2 and len(values["seed"]) >= 2
    assert cfg.optim.warmup_steps == 0


def test_cpu_sizes_fit_two_cores() -> None:
    for experiment in ("f6_lr_sensitivity", "f7_batch_stats", "placements_depth"):
        cfg = reproduce.compose(experiment, [])
        assert cfg.num_threads * cfg.hydra.launcher.n_jobs <= 2
        assert "wandb" not in cfg.logger  # offline wandb runs cost seconds each


# --- report.json rows with known numbers ---------------------------------------------------------
def write_run(path: Path, l0: float, logits: list[float]) -> str:
    """A run dir whose metrics.csv logs train/loss l0 at step 0 and attn/max_logit every 10."""
    path.mkdir(parents=True)
    rows = ["step,train/loss,attn/max_logit"]
    rows += [f"{10 * i},{l0 if i == 0 else ''},{x}" for i, x in enumerate(logits)]
    (path / "metrics.csv").write_text("\n".join(rows) + "\n")
    return str(path)


def f6_row(tmp: Path, lr: float, qk: bool, finals: list[float | None], peak: float) -> dict:
    """One variant; final None = a diverged run; each run's logits rise to ``peak``."""
    runs = []
    for seed, final in enumerate(finals):
        run_dir = write_run(tmp / f"{lr}-{qk}-{seed}", 4.6, [peak / 4, peak, peak / 2])
        status = "diverged" if final is None else "completed"
        runs.append({"run_dir": run_dir, "seed": seed, "status": status, "final_val_loss": final})
    return {"label": f"lr={lr} qk={qk}", "params": {"lr": lr, "model.qk_norm": qk}, "runs": runs}


def f6_report(tmp: Path, arms: dict[bool, dict[float, tuple[list, float]]]) -> dict:
    rows = [
        f6_row(tmp, lr, qk, finals, peak)
        for qk, curve in arms.items()
        for lr, (finals, peak) in curve.items()
    ]
    return {"variants": rows}


def by_id(verdicts: list) -> dict[str, Verdict]:
    return {v.id: v for v in verdicts}


def test_lr_sensitivity_is_wortsmans_definition() -> None:
    # mean over lrs of (loss - best loss): (1.0 + 0 + 0.5) / 3
    assert sensitivity({1e-3: 3.0, 1e-2: 2.0, 1e-1: 2.5}) == pytest.approx(0.5)
    assert sensitivity({1e-3: 2.0, 1e-2: 2.0}) == 0.0


def test_f6_pass_and_fail(tmp_path: Path) -> None:
    good = f6_report(
        tmp_path / "good",
        {
            # 1e-1: one seed diverged, one ended above the initial loss: both count at l0 = 4.6
            False: {1e-3: ([2.7, 2.7], 8.0), 1e-2: ([2.5, 2.5], 60.0), 1e-1: ([None, 5.0], 2000.0)},
            True: {1e-3: ([2.7, 2.7], 4.0), 1e-2: ([2.45, 2.45], 6.0), 1e-1: ([2.6, 2.6], 12.0)},
        },
    )
    v = by_id(evaluate("f6", good))
    assert {k: x.status for k, x in v.items()} == dict.fromkeys(
        ("F6a", "F6b", "F6c", "F6d"), "PASS"
    )
    assert v["F6a"].measured["growth"] == pytest.approx(250.0)
    assert v["F6b"].measured["growth"] == pytest.approx(3.0)
    assert v["F6c"].measured["gap"] == pytest.approx(((2.5 - 2.45) + (4.6 - 2.6)) / 2)
    assert v["F6d"].measured["no_qk"] == pytest.approx((0.2 + 0 + 2.1) / 3, abs=1e-4)
    assert v["F6d"].measured["qk"] == pytest.approx((0.25 + 0 + 0.15) / 3, abs=1e-4)

    # QK-norm changes nothing, and the unnormed logits rise only 5x.
    same = {1e-3: ([2.7, 2.7], 8.0), 1e-2: ([2.5, 2.5], 20.0), 1e-1: ([2.9, 2.9], 40.0)}
    bad = by_id(evaluate("f6", f6_report(tmp_path / "bad", {False: same, True: same})))
    assert {k: x.status for k, x in bad.items()} == dict.fromkeys(bad, "FAIL")
    assert bad["F6d"].measured["gap"] == 0.0

    # One seed per variant, or no metrics.csv: no verdict.
    one_seed = f6_report(tmp_path / "one", {qk: {1e-3: ([2.7], 8.0)} for qk in (False, True)})
    assert {x.status for x in evaluate("f6", one_seed)} == {"NO DATA"}
    for row in good["variants"]:
        for run in row["runs"]:
            (Path(run["run_dir"]) / "metrics.csv").unlink()
    assert {x.status for x in evaluate("f6", good)} == {"NO DATA"}


def f7_report(accs: dict[str, dict[int, list[float | None]]]) -> dict:
    rows = []
    for norm, by_batch in accs.items():
        for batch, per_seed in by_batch.items():
            runs = seed_runs(per_seed, "best_val_acc")
            params = {"norm": norm, "data.batch_size": batch}
            rows.append({"label": f"{norm} b{batch}", "params": params, "runs": runs})
    return {"variants": rows}


def test_f7_pass_and_fail() -> None:
    flat = {4: [0.965, 0.965], 16: [0.97, 0.97], 64: [0.97, 0.97]}
    bn = {4: [0.89, 0.91], 16: [0.95, 0.95], 64: [0.97, 0.97]}
    good = f7_report({"batchnorm": bn, "layernorm": flat, "rmsnorm": flat})
    v = by_id(evaluate("f7", good))
    assert v["F7a"].status == v["F7b"].status == "PASS"
    assert v["F7a"].measured["batchnorm_drop"] == pytest.approx(0.07)
    assert v["F7a"].measured["gap"] == pytest.approx(0.07 - 0.005)
    assert v["F7b"].measured["layernorm_spread"] == pytest.approx(0.005)

    # BatchNorm drops 0.01 while LayerNorm drops 0.05: both claims fail.
    bad = f7_report(
        {
            "batchnorm": {4: [0.96, 0.96], 16: [0.97, 0.97], 64: [0.97, 0.97]},
            "layernorm": {4: [0.92, 0.92], 16: [0.96, 0.96], 64: [0.97, 0.97]},
            "rmsnorm": flat,
        }
    )
    assert [x.status for x in evaluate("f7", bad)] == ["FAIL", "FAIL"]

    # A diverged BatchNorm seed at batch 4 scores 0: a drop no noise explains.
    ends = {4: flat[4], 64: flat[64]}
    diverged = f7_report(
        {"batchnorm": {4: [None, 0.96], 64: [0.97, 0.97]}, "layernorm": ends, "rmsnorm": ends}
    )
    assert by_id(evaluate("f7", diverged))["F7a"].status == "PASS"
    assert {x.status for x in evaluate("f7", {"variants": []})} == {"NO DATA"}


def depth_report(losses: dict[tuple[str, int], list[float | None]]) -> dict:
    rows = []
    for (placement, depth), per_seed in losses.items():
        runs = seed_runs(per_seed)
        params = {"placement": placement, "n_layer": depth}
        rows.append({"label": f"{placement} L{depth}", "params": params, "runs": runs})
    return {"variants": rows}


def test_placement_claims_pass_and_fail() -> None:
    shallow = {(p, 4): [2.75, 2.75] for p in PLACEMENTS}
    good = depth_report(
        shallow
        | {
            ("post", 12): [3.25, 3.26],
            ("pre", 12): [2.9, 2.9],
            ("deepnorm", 12): [2.72, 2.72],
            ("sandwich", 12): [2.8, 2.8],
        }
    )
    v = by_id(evaluate("placements", good))
    assert {k: x.status for k, x in v.items()} == dict.fromkeys(("P1", "P2", "P3", "P4"), "PASS")
    assert v["P2"].measured["gap"] == pytest.approx(0.15)
    assert v["P1"].measured["gap"] == pytest.approx(3.255 - 2.72)

    bad = depth_report(
        shallow
        | {
            ("post", 12): [2.8, 2.8],  # within 0.2 of the best: Post-LN did not fail
            ("pre", 12): [2.9, 2.9],
            ("deepnorm", 12): [3.1, 3.1],  # 0.35 above its 4-layer self
            ("sandwich", 12): [2.8, None],  # a diverged seed
        }
    )
    v = by_id(evaluate("placements", bad))
    assert [v[c].status for c in ("P1", "P2", "P3", "P4")] == ["FAIL", "PASS", "FAIL", "FAIL"]
    assert v["P4"].measured["deepest"] == "inf (diverged)"
    one_depth = depth_report(shallow)
    assert by_id(evaluate("placements", one_depth))["P2"].status == "NO DATA"
