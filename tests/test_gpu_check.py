"""scripts/gpu_check.sh, proven on the CPU: its dry run runs every step at tiny sizes and writes
every file; the GPU machine's package set (no wandb, no datasets) trains a job; text is
tokenized without datasets into the same token files as with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from data import corpora, tokens
from data.config import TextDataConfig
from tests.conftest import ROOT, TINY_RUN


@pytest.mark.slow  # ~45 s: CI runs it with the other slow checks, after the fast suite
def test_the_dry_run_runs_every_step_and_writes_every_file(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "WORK": str(tmp_path / "work")}
    out = tmp_path / "out"
    done = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--dry-run", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    files = {p.name for p in out.iterdir()}
    assert files == {
        "gpu_check.md",
        "gpu_check.log",
        "bench_gpt.json",
        "bench_variants.json",
        "sweep.json",
        "f3.json",
    }
    gpt = json.loads((out / "bench_gpt.json").read_text())
    names = {r["name"] for r in gpt["results"]}
    assert gpt["ok"] and {"normlab", "plain_gpt", "hf_gpt2"} <= names
    variants = {r["name"] for r in json.loads((out / "bench_variants.json").read_text())["results"]}
    assert {"pre/rmsnorm", "deepnorm/layernorm", "pre/layernorm qk_norm"} <= variants
    sweep = json.loads((out / "sweep.json").read_text())
    assert [r["jobs"] for r in sweep] == [1, 2, 4]
    assert all(r["completed"] == r["jobs"] and r["runs_per_hour"] > 0 for r in sweep)
    f3 = json.loads((out / "f3.json").read_text())
    assert sorted(r["run"].split(",")[0] for r in f3) == [
        "placement=deepnorm",
        "placement=post",
        "placement=pre",
    ]
    assert all(r["status"] == "completed" and r["final_val_loss"] > 0 for r in f3)
    md = (out / "gpu_check.md").read_text()
    steps = ("a. bench gpt", "b. runs per card", "c. bench variants", "d. train.py model=vit",
             "e. short F3")  # fmt: skip
    for step in steps:
        assert f"- {step}: exit 0" in md
    for model in ("gpt", "vit"):
        summary = json.loads((tmp_path / "work" / model / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["steps"] == 4


def test_no_output_dir_is_one_line():
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    done = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--dry-run"], cwd=ROOT, env=env, capture_output=True
    )
    assert done.returncode == 2
    assert done.stderr.decode().strip().count("\n") == 0 and b"set OUT" in done.stderr


def test_a_job_trains_with_wandb_and_datasets_absent(tmp_path):
    """The GPU machine has neither: `import wandb` / `import datasets` fail there, as here."""
    code = (
        "import sys, runpy\n"
        "for m in ('wandb', 'datasets'): sys.modules[m] = None\n"
        f"sys.argv = ['train.py', *{TINY_RUN!r}, 'trainer.max_steps=2', "
        f"'data.cache_dir={tmp_path}/cache', 'hydra.run.dir={tmp_path}/run']\n"
        "runpy.run_path('train.py', run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 2


@pytest.mark.parametrize(
    "cfg",
    [
        dict(tokenizer="char", max_chars=50_000),
        dict(tokenizer="bpe", vocab_size=300, max_chars=40_000),
        dict(tokenizer="bytes", max_chars=20_001, val_fraction=0.25),
    ],
)
def test_text_without_datasets_gives_the_same_token_files(cfg):
    cfg = TextDataConfig(**cfg)
    made = []
    for build in (tokens._build, tokens._build_in_memory):
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            (tmp / "work").mkdir()
            meta = build(cfg, tmp, lambda _: None)
            blobs = [(tmp / f).read_bytes() for f in ("train.bin", "val.bin")]
            made.append((meta["splits"], blobs, (tmp / meta["tokenizer_file"]).read_text()))
    assert made[0] == made[1]
    assert made[0][0]["val"]["chars"] == int(cfg.max_chars * cfg.val_fraction)


def test_cut_list_matches_the_split_rule():
    pieces = ["abc", "", "defg", "h"]
    assert corpora.cut_list(pieces, 0) == ([], pieces)
    assert corpora.cut_list(pieces, 3) == (["abc", ""], ["defg", "h"])
    assert corpora.cut_list(pieces, 5) == (["abc", "", "de"], ["fg", "h"])
    assert corpora.cut_list(pieces, 8) == (pieces, [])


FAKE_PYTHON = """#!/usr/bin/env bash
# A Python whose every step fails after writing a zero "measurement" to its --out file; the
# script's own checks (python -c ...) run on the real interpreter.
echo "$@" >> "$(dirname "$0")/calls"
if [ "$1" = -c ]; then exec {real} "$@"; fi
while [ $# -gt 0 ]; do
  if [ "$1" = --out ]; then echo '{{"ok": false, "results": [{{"value": 0}}]}}' > "$2"; fi
  shift
done
exit 3
"""


def test_finds_the_venv_and_records_a_failed_step_as_failed(tmp_path):
    """PYTHON unset: the project's .venv/bin/python runs every step; a step that fails is
    FAILED in gpu_check.md with no table, and what it wrote is renamed *.failed.json."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "scripts" / "gpu_check.sh").write_text((ROOT / "scripts/gpu_check.sh").read_text())
    venv_python = repo / ".venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.write_text(FAKE_PYTHON.format(real=sys.executable))
    venv_python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "OUT")}
    out = tmp_path / "out"
    done = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--dry-run", str(out)],
        cwd=repo, env={**env, "WORK": str(tmp_path / "work")}, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    calls = (venv_python.parent / "calls").read_text()
    assert "-m scripts.bench" in calls and "train.py" in calls  # the venv's Python ran them
    md = (out / "gpu_check.md").read_text()
    assert md.count("FAILED, exit 3") == 6 and "exit 0" not in md
    assert "| name | value |" not in md  # no table drawn from a failed step
    files = {p.name for p in out.iterdir()}
    assert "bench_gpt.failed.json" in files and "bench_gpt.json" not in files
    assert "sweep.json" not in files and "f3.json" not in files


def test_a_python_without_torch_is_refused_in_one_line(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    done = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--dry-run", str(tmp_path / "out")],
        cwd=ROOT, env={**os.environ, "PYTHON": str(fake)}, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "cannot import torch" in done.stderr
    assert "make setup" in done.stderr


def test_only_picks_steps_and_a_spent_budget_skips_them(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "BUDGET": "10", "WORK": str(tmp_path / "w")}
    done = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--dry-run", "--only", "b,e", str(tmp_path / "out")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    md = (tmp_path / "out" / "gpu_check.md").read_text()
    assert "- b. runs per card: SKIPPED" in md and "--only e" in md
    assert "bench" not in md and "train.py" not in md  # steps a, c and d were not asked for
    bad = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--only", "f", str(tmp_path / "o2")],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "letters a-e" in bad.stderr
