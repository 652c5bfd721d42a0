"""The sweep report (analysis/report.py; its CLI scripts/compare.py) on a synthetic sweep
with hand-computed numbers: table, report.json, plots."""

from __future__ import annotations

import json
import math
import os
import re
import time
from pathlib import Path

import pytest

from analysis import report as reporting
from analysis import runs, variants, xy
from analysis.wandb_report import report_run_id, wandb_sync_pattern
from scripts import compare

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SWEEP = ("multirun", "2026-11-29", "12-00-00")

# (placement, n_layer, seed) -> (status, best_val_loss, diverged_at_step, tokens_per_s)
RUNS = {
    ("post", 2, 0): ("completed", 2.0, None, 1000.0),
    ("post", 2, 1): ("completed", 2.2, None, 1200.0),
    ("pre", 2, 0): ("completed", 2.1, None, 900.0),
    ("pre", 2, 1): ("completed", 2.3, None, 1100.0),
    ("post", 4, 0): ("completed", 2.5, None, 500.0),
    ("post", 4, 1): ("diverged", 3.0, 30, 700.0),
    ("pre", 4, 0): ("completed", 1.9, None, 600.0),
    ("pre", 4, 1): ("completed", 2.0, None, 400.0),
}


def config_yaml(placement: str, n_layer: int, seed: int) -> str:
    # The layout conf/config.yaml resolves to; `name` carries the seed, run_dir cannot resolve.
    return f"""seed: {seed}
name: gpt-{placement}-layernorm-L{n_layer}-lr0.002-s{seed}
group: null
run_dir: ${{hydra:runtime.output_dir}}
model: {{name: gpt, n_layer: {n_layer}, n_embd: 32, n_head: 2}}
placement: {{name: {placement}}}
norm: {{name: layernorm, eps: 1.0e-5}}
optim: {{lr: 2.0e-3, warmup_steps: 0, betas: [0.9, 0.95]}}
"""


def metrics_csv(best: float, n_layer: int, steps: int = 40) -> str:
    """Sparse rows as CSVLogger writes them: train rows, val rows every 10 steps, probe rows."""
    layers = [f"grad_norm/layer_{i}" for i in range(n_layer)]
    header = ["epoch", "step", "train/loss", "val/loss", *layers, "update/model"]
    rows = [",".join(header)]
    for s in range(steps):
        blank = [""] * (n_layer + 2)
        rows.append(",".join(["0", str(s), f"{3.0 - s / steps:.4f}", *blank]))
        if s % 10 == 9:  # val/loss falls to `best` at the last validation
            val = best + (steps - 1 - s) / 100
            rows.append(",".join(["0", str(s), "", f"{val}", *[""] * (n_layer + 1)]))
        if s < 5:  # grad norm of layer i at step s: (i + 1) / n_layer + s
            grads = [f"{(i + 1) / n_layer + s}" for i in range(n_layer)]
            rows.append(",".join(["0", str(s), "", "", *grads, f"{0.01 * 2**s}"]))
    return "\n".join(rows) + "\n"


def write_run(root: Path, num: int, placement: str, n_layer: int, seed: int) -> Path:
    run = root / f"{num}_gpt-{placement}-layernorm-L{n_layer}-lr0.002-s{seed}"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra/config.yaml").write_text(config_yaml(placement, n_layer, seed))
    (run / ".hydra/hydra.yaml").write_text(
        f"hydra:\n  mode: MULTIRUN\n  runtime:\n    output_dir: {run}\n"
        "    choices:\n      experiment: null\n"
    )
    return run


def write_summary(run: Path, placement: str, n_layer: int, seed: int) -> None:
    status, best, div, tps = RUNS[placement, n_layer, seed]
    summary = {
        "status": status, "name": run.name, "model": "gpt", "placement": placement,
        "norm": "layernorm", "n_layer": n_layer, "n_embd": 32, "lr": 0.002,
        "warmup_steps": 0, "seed": seed, "steps": div or 40, "diverged_at_step": div,
        "final_train_loss": None if div else 2.0, "final_val_loss": best + 0.05,
        "best_val_loss": best, "tokens_per_s": tps, "wall_s": 1.0, "run_dir": str(run),
    }  # fmt: skip
    (run / "summary.json").write_text(json.dumps(summary))


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    root = tmp_path.joinpath(*SWEEP)
    for num, (placement, n_layer, seed) in enumerate(RUNS):
        run = write_run(root, num, placement, n_layer, seed)
        write_summary(run, placement, n_layer, seed)
        (run / "metrics.csv").write_text(metrics_csv(RUNS[placement, n_layer, seed][1], n_layer))
        if seed == 0 and n_layer == 2:
            (run / f"wandb/offline-run-2026112{num}-abc{num}").mkdir(parents=True)
    partial = write_run(root, 8, "pre", 2, 2)  # still training: no summary.json yet
    (partial / "metrics.csv").write_text(metrics_csv(2.4, 2, steps=20))
    corrupt = write_run(root, 9, "post", 2, 2)  # killed while writing its summary
    (corrupt / "summary.json").write_text('{"status": "compl')
    (root / "10_empty").mkdir()
    (root / "10_empty/metrics.csv").write_text("")
    return root


def variant(report: dict, placement: str, n_layer: int) -> dict:
    (row,) = [
        v
        for v in report["variants"]
        if v["params"]["placement"] == placement and v["params"]["n_layer"] == n_layer
    ]
    return row


def test_table_values_match_hand_computed_means(sweep: Path) -> None:
    report = reporting.write_report(sweep)
    assert report["variant_fields"] == ["placement", "n_layer"]  # not the seed-bearing name
    assert report["n_runs"] == 10
    assert len(report["variants"]) == 4

    post2 = variant(report, "post", 2)
    assert post2["seeds"] == [0, 1, 2]
    assert post2["status_counts"] == {"completed": 2, "unfinished": 1}
    assert post2["best_val_loss"]["mean"] == pytest.approx(2.1)
    assert post2["best_val_loss"]["std"] == pytest.approx(math.sqrt(0.02))  # sample std
    assert post2["best_val_loss"]["n"] == 2
    assert post2["final_val_loss"]["mean"] == pytest.approx(2.15)
    assert post2["throughput"]["mean"] == pytest.approx(1100.0)
    assert post2["throughput_unit"] == "tokens_per_s"

    pre4 = variant(report, "pre", 4)
    assert pre4["best_val_loss"]["mean"] == pytest.approx(1.95)
    assert pre4["params"] == {
        "model": "gpt", "placement": "pre", "norm": "layernorm", "param": "sp", "n_layer": 4,
        "n_embd": 32, "lr": 0.002, "warmup_steps": 0,
    }  # fmt: skip

    # The partial run counts, its numbers come from metrics.csv, the mean stays over completed.
    pre2 = variant(report, "pre", 2)
    assert pre2["status_counts"] == {"completed": 2, "unfinished": 1}
    assert pre2["best_val_loss"]["mean"] == pytest.approx(2.2)
    (partial,) = [r for r in pre2["runs"] if r["status"] == "unfinished"]
    assert partial["seed"] == 2
    assert partial["best_val_loss"] == pytest.approx(2.4)
    assert partial["steps"] == 19


def test_diverged_run_is_marked_not_averaged(sweep: Path, monkeypatch) -> None:
    figures = {}
    real_save = xy.save

    def keep(fig, out_dir, name):
        markers = [line.get_marker() for ax in fig.axes for line in ax.get_lines()]
        figures[name] = (markers, [t.get_text() for legend in fig.legends for t in legend.texts])
        return real_save(fig, out_dir, name)

    monkeypatch.setattr(xy, "save", keep)
    report = reporting.write_report(sweep)
    post4 = variant(report, "post", 4)
    assert post4["status_counts"] == {"completed": 1, "diverged": 1}
    assert post4["diverged_at_steps"] == [30]
    assert post4["best_val_loss"] == {"mean": 2.5, "std": None, "n": 1, "values": [2.5]}
    assert all(not v["diverged_at_steps"] for v in report["variants"] if v is not post4)

    md = (sweep / "report/report.md").read_text()
    (line,) = [row for row in md.splitlines() if "| post | 4 |" in row]
    assert "1 completed, 1 diverged" in line and "| 30 |" in line and "2.5000 (n=1)" in line
    (line,) = [row for row in md.splitlines() if "| post | 2 |" in row]
    assert "2.1000 ± 0.1414 (n=2)" in line and "| – |" in line
    # one diverged run -> one x at the top of the depth plot, explained in the legend
    markers, legend = figures["best_val_vs_depth.png"]
    assert markers.count("x") == 1 and "diverged (count)" in legend
    markers, legend = figures["loss_curves.png"]
    assert markers.count("x") == 2 and "diverged here" in legend  # train and val: where it stopped
    assert "placement=post (2 seeds)" in legend and "± 1 std over seeds" in legend


def test_plots_are_valid_pngs_and_json_is_strict(sweep: Path) -> None:
    report = reporting.write_report(sweep)
    out = sweep / "report"
    expected = {
        "loss_curves.png",
        "best_val_vs_depth.png",
        "grad_norm_init.png",
        "model_update.png",
    }
    assert set(report["plots"]) == expected  # no act_norm logged: no act_norm plot
    for name in expected:
        data = (out / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 5000
    strict = json.loads((out / "report.json").read_text(), parse_constant=pytest.fail)
    assert strict["variants"] == json.loads(json.dumps(report["variants"]))
    assert "best val loss" in (out / "report.md").read_text()
    warnings = "\n".join(report["warnings"])
    assert "9_gpt-post-layernorm-L2-lr0.002-s2/summary.json: unreadable JSON" in warnings
    assert "10_empty/metrics.csv: empty metrics file" in warnings

    # grad norm at init = the first logged value per layer, averaged over the seeds
    (probe,) = [
        p
        for p in report["init_probe"]
        if p["params"]["placement"] == "pre" and p["params"]["n_layer"] == 4
    ]
    assert probe["source"] == "metrics"
    assert probe["grad_norm"] == pytest.approx([0.25, 0.5, 0.75, 1.0])


def test_main_prints_group_and_sync_command(sweep: Path, tmp_path: Path, capsys) -> None:
    assert compare.main([str(sweep), "--out", str(tmp_path / "rep"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "sweep-2026-11-29-12-00-00" in out  # train.py's group for a multirun
    assert f"wandb sync {sweep}/*/wandb/offline-run-*" in out
    assert (tmp_path / "rep/report.md").is_file() and not (sweep / "report").exists()
    assert not (tmp_path / "rep/wandb").exists()  # the runs' configs name no wandb logger


def test_the_wandb_group_is_the_sweep_not_the_experiment(tmp_path: Path) -> None:
    """train.py groups a sweep's runs by the sweep dir, whatever experiment it runs; the group it
    recorded in summary.json comes first."""
    sweep = tmp_path / "multirun" / "f3"
    for seed in (0, 1):
        run = write_run(sweep, seed, "post", 2, seed)
        hydra = run / ".hydra/hydra.yaml"
        hydra.write_text(hydra.read_text().replace("experiment: null", "experiment: f3_depth"))
        write_summary(run, "post", 2, seed)
    assert reporting.write_report(sweep, plots=False)["wandb_groups"] == ["sweep-multirun-f3"]
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "wandb_group": "mine"}))
    assert reporting.write_report(sweep, plots=False)["wandb_groups"] == [
        "sweep-multirun-f3",
        "mine",
    ]


def test_the_report_joins_the_runs_wandb_group(sweep: Path, tmp_path: Path, capsys, monkeypatch):
    """Runs that logged to wandb: the report becomes a run of their group (offline here) holding
    the report files as an artifact, the variant table and the plots."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    for cfg in sweep.glob("*/.hydra/config.yaml"):
        logger = "logger: {wandb: {project: study_x, entity: null, mode: offline}}\n"
        cfg.write_text(cfg.read_text() + logger)
    assert compare.main([str(sweep), "--out", str(tmp_path / "rep"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert f"wandb report run (offline): wandb sync {tmp_path / 'rep/wandb'}/offline-run-*" in out
    assert f"wandb sync {sweep}/*/wandb/offline-run-*" in out  # the runs' own, as before
    (record,) = (tmp_path / "rep/wandb").glob("offline-run-*/run-*.wandb")
    # wandb's service process may still be writing the record when finish() returns on a loaded
    # machine (the file held only its 7-byte header twice): read it until it holds the texts.
    texts = ("study_x", "report-sweep-2026-11-29-12-00-00", "report.md", "report/variants")
    deadline = time.monotonic() + 60
    while not all(t.encode() in record.read_bytes() for t in texts) and time.monotonic() < deadline:
        time.sleep(0.2)
    data = record.read_bytes()
    for text in texts:
        assert text.encode() in data, text
    assert compare.main([str(sweep), "--out", str(tmp_path / "plain"), "--no-wandb"]) == 0
    assert not (tmp_path / "plain/wandb").exists()
    # Comparing again replaces the report's offline run: one run of one id per report dir, so
    # `wandb sync` never uploads the id twice.
    assert compare.main([str(sweep), "--out", str(tmp_path / "rep"), "--no-plots"]) == 0
    assert "replaced 1 earlier offline report run" in capsys.readouterr().out
    runs = list((tmp_path / "rep/wandb").glob("offline-run-*"))
    ids = {p.name.rsplit("-", 1)[-1] for p in runs}
    assert len(runs) == 1 and len(ids) == 1
    assert ids == {report_run_id(tmp_path / "rep").rsplit("-", 1)[-1]}


def test_explicit_group_and_probe_json(tmp_path: Path) -> None:
    """A group set in the config wins; probe.json records are averaged over seeds."""
    for seed in (0, 1):
        run = write_run(tmp_path, seed, "post", 2, seed)
        cfg = run / ".hydra/config.yaml"
        cfg.write_text(cfg.read_text().replace("group: null", "group: depth_stability"))
    records = [
        {
            "placement": p,
            "n_layer": 2,
            "seed": s,
            "grad_norm": [1.0 + s, 2.0],
            "act_norm": [1, 3 + s],
        }
        for p in ("post", "pre")
        for s in (0, 1)
    ]
    (tmp_path / "probe.json").write_text(json.dumps({"model": "gpt", "runs": records}))
    report = reporting.write_report(tmp_path)
    assert report["wandb_groups"] == ["depth_stability"]
    assert report["wandb_sync"] is None
    assert report["variants"][0]["status_counts"] == {"unfinished": 2}
    pre = [p for p in report["init_probe"] if p["params"]["placement"] == "pre"]
    assert pre[0]["grad_norm"] == [1.5, 2.0] and pre[0]["act_norm"] == [1.0, 3.5]
    assert pre[0]["params"]["model"] == "gpt" and pre[0]["source"] == "probe.json"
    assert {"grad_norm_init.png", "act_norm_init.png"} <= set(report["plots"])


def fake_run(seed: int, **params) -> runs.Run:
    run = runs.Run(Path(f"r{seed}-{params}"), {"seed": seed}, {}, {})
    run.params = params
    return run


def test_variant_fields_ignore_seed_derived_fields() -> None:
    # a name with the seed in it splits nothing; a non-canonical sweep field does
    runs = [
        fake_run(s, lr=0.001, **{"optim.weight_decay": wd, "tag": f"wd{wd}-s{s}"})
        for wd in (0.0, 0.1)
        for s in (0, 1, 2)
    ]
    assert variants.variant_fields(runs) == ["optim.weight_decay"]
    # one seed, an lr sweep: lr alone tells the variants apart
    runs = [fake_run(0, lr=lr, **{"tag": f"lr{lr}", "optim.lr": lr}) for lr in (0.1, 0.01)]
    assert variants.variant_fields(runs) == ["lr"]


def test_vit_rows_show_accuracy_and_samples_per_s(tmp_path: Path) -> None:
    for seed, acc in ((0, 0.9), (1, 0.8)):
        run = tmp_path / f"vit-s{seed}"
        run.mkdir()
        summary = {"status": "completed", "model": "vit", "placement": "pre", "seed": seed,
                   "best_val_acc": acc, "samples_per_s": 300.0 + 2 * seed}  # fmt: skip
        (run / "summary.json").write_text(json.dumps(summary))
    report = reporting.write_report(tmp_path, plots=False)
    (row,) = report["variants"]
    assert row["best_val_acc"]["mean"] == pytest.approx(0.85)
    assert row["throughput_unit"] == "samples_per_s"
    table = reporting.markdown_table(report)
    assert "best val acc" in table and "0.850 ± 0.071" in table and "301 samples/s" in table


def test_empty_dir_fails_with_one_line(tmp_path: Path, capsys) -> None:
    assert compare.main([str(tmp_path)]) == 1
    assert re.match(r"error: no runs under .*pass a sweep dir", capsys.readouterr().err)


def test_probe_json_with_mean_std_summaries(tmp_path: Path) -> None:
    """training/init_probe.py's layout: seed-averaged runs holding {"mean", "std"} per quantity."""
    runs = [
        {
            "placement": p, "n_layer": n, "n_samples": 3,
            "loss": {"mean": 5.5, "std": 0.1},
            "grad_norm/layer": {"mean": [float(n)] * n, "std": [0.1] * n},
            "grad_norm/fc2": {"mean": [9.0] * n, "std": [0.1] * n},
            "act_norm": {"mean": list(range(1, n + 1)), "std": [0.0] * n},
            "last_fc2_grad_norm": {"mean": 1 / n, "std": 0.5},
        }
        for p in ("post", "pre")
        for n in (2, 4)
    ]  # fmt: skip
    data = {
        "finding": "F1",
        "model": "gpt",
        "config": {"n_embd": 32},
        "seeds": [0, 1],
        "runs": runs,
    }
    (tmp_path / "probe.json").write_text(json.dumps(data))
    report = reporting.write_report(tmp_path)
    assert report["n_runs"] == 0 and len(report["init_probe"]) == 4
    (pre4,) = [
        p
        for p in report["init_probe"]
        if p["params"]["placement"] == "pre" and p["params"]["n_layer"] == 4
    ]
    assert pre4["grad_norm"] == [4.0] * 4 and pre4["act_norm"] == [1.0, 2.0, 3.0, 4.0]
    assert pre4["last_fc2"] == 0.25 and pre4["series"] == "placement=pre"
    assert set(report["plots"]) == {"init_grid.png", "grad_norm_init.png", "act_norm_init.png"}
    # one depth: no panel against depth to draw, so no F1 grid (the per-layer ones stay)
    one = tmp_path / "one"
    one.mkdir()
    shallow = {**data, "runs": [r for r in runs if r["n_layer"] == 2]}
    (one / "probe.json").write_text(json.dumps(shallow))
    assert set(reporting.write_report(one)["plots"]) == {"grad_norm_init.png", "act_norm_init.png"}


def test_the_wandb_sync_line_never_takes_the_reports_own_run(tmp_path: Path) -> None:
    for run in ("a", "b"):
        (tmp_path / run / "wandb" / f"offline-run-{run}").mkdir(parents=True)
    report = tmp_path / "report"
    assert wandb_sync_pattern(tmp_path, skip=report) == str(
        tmp_path / "*" / "wandb" / "offline-run-*"
    )
    (report / "wandb" / "offline-run-r").mkdir(parents=True)  # the glob would match it now
    listed = wandb_sync_pattern(tmp_path, skip=report)
    assert listed == " ".join(str(tmp_path / r / "wandb" / f"offline-run-{r}") for r in "ab")


def test_no_wandb_group_is_named_for_runs_that_never_logged_to_wandb(tmp_path, capsys) -> None:
    from tests.helpers import settings_run

    root = tmp_path / "sweep"
    for seed in (0, 1):  # runs with no wandb dir, in no group
        settings_run(root, f"seed={seed}", seed, 2.0)
    assert compare.main([str(root), "--no-wandb", "--no-plots"]) == 0
    assert "wandb group to open" not in capsys.readouterr().out
    assert "in no wandb group" in (root / "report" / "report.md").read_text()


def test_figures_are_drawn_again_only_when_what_they_draw_from_changed(
    sweep: Path, tmp_path: Path, monkeypatch
) -> None:
    out = tmp_path / "rep"
    first = reporting.write_report(sweep, out)["plots"]
    assert first and (out / reporting.PLOTS_KEY).is_file()
    drawn = []
    real = reporting.write_plots
    monkeypatch.setattr(reporting, "write_plots", lambda *a, **k: drawn.append(1) or real(*a, **k))
    assert reporting.write_report(sweep, out)["plots"] == first and drawn == []  # reused
    assert reporting.write_report(sweep, out, plots=False)["plots"] == []
    assert reporting.write_report(sweep, out)["plots"] == first and drawn == [1]  # listed again
    metrics = next(sweep.rglob("metrics.csv"))
    metrics.write_text(metrics.read_text())  # a run wrote more: its modification time moved
    os.utime(metrics, ns=(metrics.stat().st_atime_ns, metrics.stat().st_mtime_ns + 10**9))
    reporting.write_report(sweep, out)
    assert drawn == [1, 1]
