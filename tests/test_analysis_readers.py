"""Readers count each run once and never run a run dir's resolvers: a `latest` link or a link
loop does not add runs, ${oc.env:...} in a shared run dir never reaches a report, and a bad
summary is one warning, never a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

from analysis import runs
from scripts import compare


def fake_run(root: Path, name: str, seed: int, loss: float, var: str = "SECRET", **summary) -> Path:
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra/config.yaml").write_text(
        f"seed: {seed}\nname: gpt-pre-s{seed}\n"
        "model: {name: gpt, n_layer: 2}\nplacement: {name: pre}\nnorm: {name: layernorm}\n"
        f"optim: {{lr: 0.001, note: '${{oc.env:NORMLAB_TEST_{var},unset}}', "
        "label: 'L${model.n_layer}'}\n"
    )
    record = {"status": "completed", "model": "gpt", "placement": "pre", "norm": "layernorm",
              "n_layer": 2, "seed": seed, "best_val_loss": loss}  # fmt: skip
    (run / "summary.json").write_text(json.dumps({**record, **summary}))
    return run


def sweep(tmp_path: Path) -> Path:
    root = tmp_path / "sweep"
    fake_run(root, "seed=0", 0, 2.0)
    real = fake_run(root, "seed=1", 1, 3.0)
    (root / "latest").symlink_to(real, target_is_directory=True)
    (root / "nested").mkdir()
    (root / "nested" / "loop").symlink_to(root, target_is_directory=True)
    return root


def test_runs_reached_through_links_count_once_under_their_real_path(tmp_path):
    root = sweep(tmp_path)
    found = runs.find_run_dirs(root)
    assert found == [root / "seed=0", root / "seed=1"]


def test_the_report_has_each_run_once_and_no_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMLAB_TEST_SECRET", "hunter2")
    monkeypatch.setenv("NORMLAB_TEST_OTHER", "swordfish")
    root = sweep(tmp_path)
    bad = dict(status="failed", placement=["pre", "post"], n_layer=[2])  # a list: unhashable
    fake_run(root, "seed=2", 2, 9.0, var="OTHER", **bad)
    out = tmp_path / "report"
    assert compare.main([str(root), "--out", str(out), "--no-plots", "--no-wandb"]) == 0
    report = json.loads((out / "report.json").read_text())
    dirs = [r["run_dir"] for v in report["variants"] for r in v["runs"]]
    assert sorted(Path(d).name for d in dirs) == ["seed=0", "seed=1", "seed=2"]
    text = (out / "report.md").read_text() + (out / "report.json").read_text()
    assert "hunter2" not in text and "swordfish" not in text
    loaded, _ = runs.load_runs(root)  # what every report derives its columns from
    notes = sorted(r.params["optim.note"] for r in loaded)
    assert notes == [
        "${oc.env:NORMLAB_TEST_OTHER,unset}",
        *["${oc.env:NORMLAB_TEST_SECRET,unset}"] * 2,
    ]


def test_own_key_references_still_resolve(tmp_path):
    run = fake_run(tmp_path, "r", 0, 1.0)
    flat = runs.read_yaml_flat(run / ".hydra/config.yaml", runs.Warnings(quiet=True))
    assert flat["optim.label"] == "L2"
    assert flat["optim.note"] == "${oc.env:NORMLAB_TEST_SECRET,unset}"
    assert os.environ.get("NORMLAB_TEST_SECRET") is None
