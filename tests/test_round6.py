"""Reliability round 6, one test per defect: a publish into a file path or with mkdtemp's mode,
markdown cells with a live link or a code span, settings recorded that do nothing (a guard named
twice, a spike window that never scores), and a message naming the wrong key."""

from __future__ import annotations

import json
import os
import re

import pytest

from analysis.report import write_report
from experiments.verdicts import publish
from runs.errors import ConfigError
from tests.helpers import settings_run, sweep_out
from training.run_config import typed_config


def test_publish_into_a_file_path_is_refused_before_touching_anything(tmp_path) -> None:
    out = sweep_out(tmp_path)
    dest = tmp_path / "docs" / "f6"
    publish(out, dest, "f6", ("lr_sensitivity.png",), "verdict")
    before = sorted(p.name for p in dest.parent.iterdir())
    verdict = (dest / "verdict.md").read_text()
    with pytest.raises(SystemExit, match="takes a directory and .*verdict.md is a file"):
        publish(out, dest / "verdict.md", "f6", ("lr_sensitivity.png",), "verdict")
    assert (dest / "verdict.md").read_text() == verdict
    assert sorted(p.name for p in dest.parent.iterdir()) == before  # no hidden .old left


def test_a_first_publish_creates_its_dir_with_the_users_umask(tmp_path) -> None:
    old = os.umask(0o022)
    try:
        dest = tmp_path / "docs" / "f6"
        publish(sweep_out(tmp_path), dest, "f6", ("lr_sensitivity.png",), "verdict")
    finally:
        os.umask(old)
    assert dest.stat().st_mode & 0o777 == 0o755


def test_a_run_named_with_a_link_and_backticks_renders_no_link_or_code_span(tmp_path) -> None:
    sweep = tmp_path / "sweep"
    for seed in (0, 1):
        settings_run(sweep, f"s{seed}\n| [l](javascript:alert(1)) `x`", seed, 2.0)
    write_report(sweep, plots=False)
    for name in ("report.md", "cards.md"):
        text = (sweep / "report" / name).read_text()
        assert not re.search(r"(?<!\\)\]\(javascript", text), name
        assert not re.search(r"(?<!\\)`x(?<!\\)`", text), name
        rows = [line for line in text.splitlines() if "javascript" in line]
        assert rows and all(line.startswith("|") for line in rows)  # one row each, no break


@pytest.mark.parametrize(
    "override,line",
    [
        ("optim.guards=[skip_step,skip_step]", "optim.guards names skip_step twice"),
        ("probes.spike_sigma_window=8", "probes.spike_sigma_window must be an integer >= 19"),
        ("norm.alpha_attn=-1 norm=dyt", "norm.alpha_attn must be > 0"),
        ("norm.alpha_attn=0.8 norm=derf placement=post",
         "norm.alpha_attn sets the norm in front of the attention, and placement=post has none"),
        ("model.emb_gain=true placement=ngpt model.qk_norm=false",
         "model.emb_gain=true does not combine with placement=ngpt"),
    ],
)  # fmt: skip
def test_a_setting_that_would_do_nothing_or_a_wrong_key_is_one_line(override, line, compose_cfg):
    over = override.split()
    with pytest.raises((ConfigError, ValueError)) as err:
        typed_config(compose_cfg(over))
    assert line in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("window,scores", [(18, False), (19, True)])
def test_the_least_spike_window_admitted_is_the_least_that_scores(window, scores) -> None:
    """30 steps of noise, then a 100x loss: a window of 19 scores it (20 values: the step and
    19 before it), one of 18 never holds enough to score (and is refused by the check)."""
    from training.probe_config import SCORE_FROM
    from training.probes.spikes import SpikeScore

    score = SpikeScore(window=window)
    for step in range(30):
        score.score("loss", 1.0 + 0.01 * (step % 3), step)
    score.score("loss", 100.0, 30)
    assert (score.spikes["loss"] == [30]) is scores
    assert (window >= SCORE_FROM) is scores


def test_constants_rebuilt_from_job_records_name_every_dir_as_named(tmp_path) -> None:
    """The fast version of the test below: two job dirs whose overrides.yaml share
    trainer.max_steps=3 (named by neither), and one record too few to name them: none."""
    from runs.jobs import job_dir, read_constants, rebuilt_constants

    shared = "trainer.max_steps=3"
    for seed in (0, 1):
        over = [shared, f"seed={seed}"]
        job = tmp_path / job_dir(over, None, {"trainer.max_steps": shared})
        (job / ".hydra").mkdir(parents=True)
        (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in over))
    jobs = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    assert rebuilt_constants(jobs) == {"trainer.max_steps": shared}
    (jobs[0] / ".hydra" / "overrides.yaml").write_text("- seed=0\n")  # then names disagree
    assert rebuilt_constants(jobs) == {}
    (tmp_path / ".constants.json").write_text("[1]")
    with pytest.raises(ConfigError, match="not a mapping.*delete it"):
        read_constants(tmp_path / ".constants.json")


@pytest.mark.slow  # two tiny sweeps of two jobs and a refused one: ~16 s
def test_a_lost_constants_record_is_rebuilt_and_a_garbled_one_is_one_line(tmp_path) -> None:
    """.constants.json deleted: the rerun finds its finished jobs (their own records rebuild
    it), reruns nothing and makes no new dir; garbled: one line naming the file."""
    import subprocess
    import sys

    from tests.conftest import ROOT, TINY_RUN

    def sweep() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "train.py", "-m", *TINY_RUN, "logger=csv", "seed=0,1",
             f"hydra.sweep.dir={tmp_path}"],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    assert sweep().returncode == 0
    dirs = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))
    record = (tmp_path / ".constants.json").read_text()
    (tmp_path / ".constants.json").unlink()
    again = sweep()
    assert again.returncode == 0 and "2 skipped" in again.stdout
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == dirs
    assert (tmp_path / ".constants.json").read_text() == record
    (tmp_path / ".constants.json").write_text("{garbled")
    bad = sweep()
    assert bad.returncode == 1 and bad.stderr.strip().count("\n") == 0
    assert ".constants.json cannot be read" in bad.stderr and "Traceback" not in bad.stderr


def test_migrate_leaves_a_foreign_dir_alone_and_a_bad_file_is_one_line(tmp_path, capsys) -> None:
    """Another tool's dir (a probe.json of its own, a torch file named .ckpt) is not rewritten,
    locked or given digests; a cut summary.json in a normlab run dir is one line, exit 1."""
    import torch

    from scripts import migrate

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "probe.json").write_text(json.dumps([{"x": 1}]))
    torch.save({"weights": torch.zeros(2, 3)}, foreign / "model.ckpt")
    before = {p.name: p.read_bytes() for p in foreign.iterdir()}
    assert migrate.main([str(foreign)]) == 0
    assert {p.name: p.read_bytes() for p in foreign.iterdir()} == before  # no .lock, no .sha256
    assert "not a normlab run dir" in capsys.readouterr().out
    cut = tmp_path / "cut"
    settings_run(cut, "run", 0, 2.0)
    summary = cut / "run" / "summary.json"
    summary.write_text(summary.read_text()[:40])  # a run dir still, by its config record
    assert migrate.main([str(cut)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_a_cut_or_foreign_input_to_the_findings_commands_is_one_line(
    tmp_path, monkeypatch, capsys
) -> None:
    """--recompute on an unknown finding or a malformed table, --recompute and --freeze on a
    cut frozen.json, plan_seeds on a cut or list-shaped verdict or a missing --pilots dir,
    coord_check on --batch-size 0 or an --out that is a file: each one line, exit non-zero."""
    import analysis.findings as findings
    from experiments import registry, reproduce
    from scripts import coord_check, plan_seeds

    def one_line(code: int) -> None:
        captured = capsys.readouterr()
        said = (captured.out + captured.err).strip()
        assert code != 0 and said.startswith("error: ") and "Traceback" not in said, said

    records = {"f99": {"finding": "f99", "claims": [], "table": {"rows": []}},
               "f5": {"finding": "f5", "claims": [], "table": {"rows": [{}]}}}  # fmt: skip
    for name, record in records.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "verdict.json").write_text(json.dumps(record))
        one_line(reproduce.main(["--recompute", str(tmp_path / name)]))
    cut = tmp_path / "frozen.json"
    cut.write_text('{"registry": "ab')
    monkeypatch.setattr(findings, "FROZEN", cut)
    monkeypatch.setattr(registry, "FROZEN", cut)
    one_line(reproduce.main(["--recompute", str(tmp_path / "f5")]))
    one_line(reproduce.main(["--freeze", "f8"]))
    assert cut.read_text() == '{"registry": "ab'  # never overwritten
    pilots = tmp_path / "pilots"
    (pilots / "f2").mkdir(parents=True)
    for text in ("{cut", "[1, 2]"):
        (pilots / "f2" / "verdict.json").write_text(text)
        one_line(plan_seeds.main(["--pilots", str(pilots)]))
    one_line(plan_seeds.main(["--pilots", str(tmp_path / "missing")]))
    one_line(coord_check.main(["--batch-size", "0"]))
    (tmp_path / "afile").write_text("")
    one_line(coord_check.main(["--out", str(tmp_path / "afile")]))


def test_a_record_of_an_older_layout_is_never_pooled_with_current_ones(tmp_path) -> None:
    """model.norm_eps=0.1 (before norm had a group) beside norm.eps=1e-5: not two seeds of one
    variant; the older run is left out, naming migrate."""
    sweep = tmp_path / "sweep"
    settings_run(sweep, "seed=0", 0, 2.0, **{"norm.eps": 1e-5})
    settings_run(sweep, "old-seed=1", 1, 2.5, **{"model.norm_eps": 0.1})
    report = write_report(sweep, plots=False)
    (variant,) = report["variants"]
    assert [r["seed"] for r in variant["runs"]] == [0]
    assert any("older record layout (model.norm_eps)" in w and "scripts.migrate" in w
               for w in report["warnings"])  # fmt: skip
