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
from data.text import TextDataConfig
from tests.conftest import ROOT, TINY_RUN


@pytest.mark.slow  # 37 s: CI runs it with the other slow checks, after the fast suite
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
    assert [r["jobs"] for r in sweep] == [1, 2]
    assert all(r["completed"] == r["jobs"] and r["runs_per_hour"] > 0 for r in sweep)
    f3 = json.loads((out / "f3.json").read_text())
    assert sorted(r["run"].split(",")[0] for r in f3) == [
        "placement=deepnorm",
        "placement=post",
        "placement=pre",
    ]
    assert all(r["status"] == "completed" and r["final_val_loss"] > 0 for r in f3)
    md = (out / "gpu_check.md").read_text()
    for step in ("a. bench gpt", "a. bench variants", "b. train.py model=vit", "d. short F3"):
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
