"""Reproductions: every experiment composes at both sizes, the claims decide known numbers right,
and F1 runs end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from scripts import reproduce
from scripts.analysis.findings import FINDINGS, NoData, Verdict, evaluate
from scripts.analysis.findings.depth import post_update_jumps
from tests.reports import seed_runs

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml"))
CPU_EXPERIMENTS = [e for e in EXPERIMENTS if not e.endswith("_gpu")]


# --- configs -------------------------------------------------------------------------------------
def test_every_finding_has_both_sizes() -> None:
    for finding in FINDINGS.values():
        assert finding.experiment in EXPERIMENTS
        assert f"{finding.experiment}_gpu" in EXPERIMENTS
    assert all(e.removesuffix("_gpu") in CPU_EXPERIMENTS for e in EXPERIMENTS)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_composes_and_sweeps(experiment: str) -> None:
    cfg = reproduce.compose(experiment, [])
    jobs = reproduce.sweep_jobs(cfg, [])
    swept = reproduce.swept_values(jobs)
    assert len(jobs) >= 2 and all(len(set(job)) == len(job) for job in jobs)
    assert len(jobs) == math.prod(len(v) for v in swept.values())
    # Every job composes (a typo in a swept key or option fails here) ...
    for job in (jobs[0], jobs[-1]):
        reproduce.compose(experiment, job)
    # ... and the size decides where and how it runs.
    if experiment.endswith("_gpu"):
        assert cfg.trainer.accelerator == "gpu"
        assert cfg.hydra.launcher._target_.endswith("BasicLauncher")
    else:
        assert cfg.trainer.accelerator == "cpu"
        assert cfg.num_threads * cfg.hydra.launcher.n_jobs <= 2  # fits the 2-core reference box


def test_finding_figures_plot_keys_their_sweeps_vary() -> None:
    """Each finding's x-vs-y figure (drawn into the report, copied by --publish) plots a key
    that both sizes of its experiment sweep."""
    figures = [(f, fig) for f in FINDINGS.values() for fig in f.figures]
    assert {fig.name for _, fig in figures} == {"lr_sweep.png", "acc_vs_batch.png"}
    for finding, figure in figures:
        assert figure.name in finding.plots
        for size in ("", "_gpu"):
            cfg = reproduce.compose(finding.experiment + size, [])
            swept = reproduce.swept_values(reproduce.sweep_jobs(cfg, []))
            assert len(swept[figure.x]) >= 2


def test_gpu_size_overrides_sweep_params() -> None:
    cpu = reproduce.swept_values(reproduce.sweep_jobs(reproduce.compose("f3_depth", []), []))
    gpu = reproduce.swept_values(reproduce.sweep_jobs(reproduce.compose("f3_depth_gpu", []), []))
    assert cpu["placement"] == gpu["placement"] == ["post", "pre", "deepnorm"]
    assert max(map(int, gpu["model.n_layer"])) > max(map(int, cpu["model.n_layer"]))


def test_command_line_sweep_replaces_experiment_params() -> None:
    cfg = reproduce.compose("f2_warmup", ["seed=3"])
    jobs = reproduce.sweep_jobs(cfg, ["seed=3", "optim.lr=1e-4,2e-4,3e-4"])
    swept = reproduce.swept_values(jobs)
    assert swept["seed"] == ["3"] and len(swept["optim.lr"]) == 3
    assert len(jobs) == 2 * 3 * 2  # placements x lrs x warmups


# --- verdicts on known numbers ----------------------------------------------------------------
def row(losses: list[float | None], **params) -> dict:
    """A report.json variant: one run per loss; None = a diverged run."""
    runs = seed_runs(losses)
    label = " ".join(f"{k}={v}" for k, v in params.items())
    return {"label": label, "params": params, "runs": runs, "throughput": {"mean": 100.0}}


def status(verdicts: list, claim: str) -> str:
    return next(v.status for v in verdicts if v.id == claim)


def f2_report(post_off: list, post_on: list, pre_off: list, pre_on: list) -> dict:
    rows = []
    for placement, off, on in (("post", post_off, post_on), ("pre", pre_off, pre_on)):
        rows.append(row(off, placement=placement, lr=1e-3, warmup_steps=0))
        rows.append(row(on, placement=placement, lr=1e-3, warmup_steps=100))
        rows.append(row([3.0, 3.0], placement=placement, lr=3e-3, warmup_steps=0))
        rows.append(row([3.0, 3.0], placement=placement, lr=3e-3, warmup_steps=100))
    return {"variants": rows}


def test_f2_pass_and_fail() -> None:
    settings = {"ref_lr": 1e-3}
    good = evaluate("f2", f2_report([3.0, 3.1], [2.5, 2.6], [2.52, 2.5], [2.5, 2.5]), settings)
    assert [v.status for v in good] == ["PASS", "PASS"]
    f2a = good[0].measured
    assert f2a["gap"] == pytest.approx(0.5) and f2a["post_no_warmup"] == pytest.approx(3.05)
    # The gap is 0.09 < 0.10; Pre-LN without warmup 0.08 worse > 0.05.
    bad = evaluate("f2", f2_report([2.64, 2.64], [2.55, 2.55], [2.58, 2.58], [2.5, 2.5]), settings)
    assert [v.status for v in bad] == ["FAIL", "FAIL"]
    # A diverged seed makes Post-LN without warmup worse than anything that trained.
    diverged = evaluate("f2", f2_report([None, 2.6], [2.55, 2.55], [2.5], [2.5, 2.5]), settings)
    assert status(diverged, "F2a") == "PASS" and status(diverged, "F2b") == "NO DATA"
    assert status(evaluate("f2", f2_report([3], [2], [2], [2]), {}), "F2a") == "NO DATA"


def depth_report(losses: dict[tuple[str, int], list]) -> dict:
    return {
        "variants": [
            row(v, placement=p, n_layer=d, warmup_steps=50) for (p, d), v in losses.items()
        ]
    }


def test_depth_claims_pass_and_fail() -> None:
    healthy = {("pre", 3): [2.6, 2.6], ("deepnorm", 3): [2.5, 2.5]}
    good = depth_report(
        {
            **healthy,
            ("post", 3): [2.52, 2.56],
            ("post", 24): [3.2, None],
            ("pre", 24): [2.75, 2.8],
            ("deepnorm", 24): [2.5, 2.55],
        }
    )
    verdicts = evaluate("f3", good, {"max_steps": 200})
    assert {v.id: v.status for v in verdicts} == {
        "F3a": "PASS",
        "F3b": "PASS",
        "F3c": "NO DATA",  # no metrics.csv with update/model
        "F4": "PASS",
    }
    bad = depth_report(
        {
            **healthy,
            ("post", 3): [2.7, 2.7],  # F4: 0.1 above Pre-LN
            ("post", 24): [2.85, 2.85],  # F3a: only 0.1 above the best
            ("pre", 24): [3.0, 3.0],  # F3b: 0.4 above its shallow self
            ("deepnorm", 24): [2.75, 2.75],
        }
    )
    verdicts = evaluate("f3", bad, {"max_steps": 200})
    assert [status(verdicts, c) for c in ("F3a", "F3b", "F4")] == ["FAIL", "FAIL", "FAIL"]
    assert status(evaluate("vit", bad, {}), "V1") == "FAIL"


def test_update_claim_reads_metrics(tmp_path: Path) -> None:
    def run(name: str, peak: float) -> dict:
        path = tmp_path / name
        path.mkdir()
        rows = ["step,update/model"] + [f"{s},{peak * min(s, 20) / 20}" for s in range(101)]
        (path / "metrics.csv").write_text("\n".join(rows) + "\n")
        return {"run_dir": str(path), "status": "completed", "best_val_loss": 2.5}

    def variant(placement: str, peak: float) -> dict:
        runs = [run(f"{placement}-{peak}-{i}", peak) for i in range(2)]
        return {"label": placement, "params": {"placement": placement, "n_layer": 12}, "runs": runs}

    report = {"variants": [variant("post", 6.0), variant("deepnorm", 2.0)]}
    v = post_update_jumps(report, {"max_steps": 200}, Verdict("x", "", ""))
    # Early window: steps 1..10 (5% of 200); mean of peak * s / 20 = peak * 5.5 / 20.
    assert v.status == "PASS" and v.measured["ratio"] == pytest.approx(3.0)
    assert v.measured["post"] == pytest.approx(6.0 * 5.5 / 20)
    report["variants"][1] = variant("deepnorm", 4.0)
    v = post_update_jumps(report, {"max_steps": 200}, Verdict("x", "", ""))
    assert v.status == "FAIL" and v.measured["ratio"] == pytest.approx(1.5)
    with pytest.raises(NoData):  # window 1..0: nothing logged there
        post_update_jumps(report, {"max_steps": 10}, Verdict("x", "", ""))


def probe_report(post_slope: float, pre_slope: float, pre_growth: float) -> dict:
    """init_probe groups with last_fc2 = c * L**slope and act_norm rising by pre_growth."""
    groups = []
    for placement, slope, growth in (("post", post_slope, 1.0), ("pre", pre_slope, pre_growth)):
        for depth in (6, 12, 24, 48):
            act = [1.0 + (growth - 1.0) * i / (depth - 1) for i in range(depth)]
            params = {"placement": placement, "n_layer": depth}
            groups.append({"params": params, "last_fc2": 0.2 * depth**slope, "act_norm": act})
    return {"variants": [], "init_probe": groups}


def test_f1_pass_and_fail() -> None:
    good = evaluate("f1", probe_report(0.05, -0.5, 7.0))
    assert [v.status for v in good] == ["PASS"] * 4
    assert good[0].measured["slope"] == pytest.approx(0.05, abs=1e-4)
    assert good[1].measured["slope"] == pytest.approx(-0.5, abs=1e-4)
    assert good[3].measured["ratio"] == pytest.approx(7.0)
    bad = evaluate("f1", probe_report(0.2, -0.25, 1.5))
    assert [v.status for v in bad] == ["FAIL", "FAIL", "PASS", "FAIL"]
    assert [v.status for v in evaluate("f1", {"variants": []})] == ["NO DATA"] * 4


def test_f5_tolerance() -> None:
    def report(rms: list) -> dict:
        rows = [
            row([2.50, 2.52], placement="pre", norm="layernorm"),
            row(rms, placement="pre", norm="rmsnorm"),
        ]
        return {"variants": rows}

    assert evaluate("f5", report([2.53, 2.55]))[0].status == "PASS"  # 0.03 apart
    v = evaluate("f5", report([2.58, 2.60]))[0]  # 0.08 apart
    assert v.status == "FAIL" and v.measured["pre_diff"] == pytest.approx(0.08)


# --- F1 end to end -------------------------------------------------------------------------------
def test_f1_end_to_end(tmp_path: Path, capsys) -> None:
    """reproduce.py f1 runs train.py's init-probe sweep, compares, and decides the F1 claims;
    the same command again finds every run finished, launches nothing and publishes."""
    out = tmp_path / "f1"
    small = ["init_probe.depths=[6,12,24]", "init_probe.seeds=[0,1]", "init_probe.batches=2"]
    argv = ["f1", "--out", str(out), "hydra/launcher=basic", *small]  # one process: one import
    assert reproduce.main(argv) == 0
    record = json.loads((out / "verdict.json").read_text())
    claims = {c["id"]: c for c in record["claims"]}
    assert list(claims) == ["F1a", "F1b", "F1c", "F1d"]
    assert all(c["status"] in ("PASS", "FAIL") and c["measured"] for c in claims.values())
    assert record["n_runs"] == 3 and record["sweep_returncode"] == 0
    # The slopes agree with training.init_probe's own fit over the same seed means.
    slopes = {}
    for probe in out.glob("*/probe.json"):
        slopes.update(json.loads(probe.read_text())["depth_slopes"])
    assert claims["F1a"]["measured"]["slope"] == pytest.approx(slopes["post"], abs=1e-3)
    assert claims["F1b"]["measured"]["slope"] == pytest.approx(slopes["pre"], abs=1e-3)
    # LayerNorm output has RMS 1 after every Post-LN block; Pre-LN's stream grows.
    assert claims["F1c"]["measured"]["ratio"] == pytest.approx(1.0, abs=0.01)
    assert claims["F1c"]["status"] == claims["F1d"]["status"] == "PASS"
    assert "| F1a |" in (out / "verdict.md").read_text()
    capsys.readouterr()
    docs = tmp_path / "docs"
    assert reproduce.main([*argv, "--publish", str(docs)]) == 0
    assert "not launching the sweep again" in capsys.readouterr().out
    again = json.loads((out / "verdict.json").read_text())
    assert again["wall_s"] == record["wall_s"]  # the sweep's own time, not the re-evaluation's
    published = sorted(str(p.relative_to(docs)) for p in docs.rglob("*") if p.is_file())
    assert published == [
        "report/act_norm_init.png",
        "report/grad_norm_init.png",
        "report/report.md",
        "verdict.md",
    ]
    assert str(out) not in (docs / "report" / "report.md").read_text()
