"""Reliability: kill and resume, determinism, bad input, sweeps that lose a job (DDP on CPU:
test_ddp_cpu.py)."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import train
from runs.errors import ConfigError
from tests.conftest import ROOT  # noqa: E402
from tests.helpers import metric_rows
from tests.helpers import train_py as python
from training.launch import ChoiceError, check_choices, group_options
from training.reliability.checkpoint_io import AtomicCheckpointIO
from training.reliability.checkpoints import DiskError
from training.reliability.metrics_csv import keep_rows_below

ENV = {**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------- kill, resume, determinism

LONG = ["trainer.max_steps=120", "trainer.val_check_interval=10", "checkpoint.every_n_steps=10"]
LONG += ["model.dropout=0.1", "logger.csv.flush_logs_every_n_steps=1", "optim.warmup_steps=10"]


BPE = ["data.tokenizer=bpe", "data.vocab_size=512"]  # trained once, read from the token cache
# guards and instruments with state of their own (histories, warm-start vectors) resume too
GUARDS = ["optim.guards=[skip_step,clip_update]", "probes.add=[spectral,spike_score,adam_state]"]
GUARDS += ["+probes.every.spectral=5"]


@pytest.mark.parametrize(
    "data",
    [
        [],
        pytest.param(BPE, marks=pytest.mark.slow, id="bpe"),
        pytest.param(GUARDS, marks=pytest.mark.slow, id="guards"),
    ],
)
def test_sigkilled_run_resumes_to_the_uninterrupted_metrics(tmp_path, tiny_run, compose_cfg, data):
    tiny_run = [*tiny_run, *data]
    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "train.py", *tiny_run, *LONG, f"hydra.run.dir={killed}"],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 180
        while not (killed / "last.ckpt").exists() and proc.poll() is None:
            assert time.monotonic() < deadline, "no periodic checkpoint appeared"
            time.sleep(0.02)
        time.sleep(0.3)  # a few steps past the checkpoint, maybe mid-way through the next one
        proc.send_signal(signal.SIGKILL)
    finally:
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, err.decode()[-2000:]
    assert not (killed / "summary.json").exists()
    ckpt_step = torch.load(killed / "last.ckpt", weights_only=False)["global_step"]
    written = max(step for step, _ in metric_rows(killed / "metrics.csv"))
    assert 0 < ckpt_step <= written < 120  # rows past the checkpoint exist: they must go

    # The same command again continues; an uninterrupted run is the reference.
    resumed = train.run(compose_cfg([*tiny_run, *LONG, f"run_dir={killed}"]))
    reference = train.run(compose_cfg([*tiny_run, *LONG, f"run_dir={tmp_path / 'reference'}"]))
    assert resumed["resumed_from_step"] == ckpt_step and resumed["status"] == "completed"
    expected = metric_rows(tmp_path / "reference" / "metrics.csv")
    assert metric_rows(killed / "metrics.csv") == expected  # every step once, bit for bit
    assert {s for s, k in expected if k == "train/loss"} == set(range(120))
    for key in ("final_train_loss", "final_val_loss", "best_val_loss", "steps"):
        assert resumed[key] == reference[key], key


def test_rerun_skips_a_finished_run_and_resume_false_starts_fresh(tmp_path, tiny_run, compose_cfg):
    cfg = compose_cfg([*tiny_run, f"run_dir={tmp_path}"])
    first = train.run(cfg)
    assert train.run(cfg) == json.loads((tmp_path / "summary.json").read_text())  # skipped
    assert json.loads((tmp_path / "summary.json").read_text())["wall_s"] == first["wall_s"]
    with pytest.raises(ConfigError, match=r"optim\.lr: 0\.005 -> 0\.01.*resume=false"):
        train.run(compose_cfg([*tiny_run, "optim.lr=0.01", f"run_dir={tmp_path}"]))
    fresh = train.run(compose_cfg([*tiny_run, "resume=false", f"run_dir={tmp_path}"]))
    assert fresh["resumed_from_step"] is None and fresh["status"] == "completed"
    (aside,) = (tmp_path / "checkpoints").glob("superseded-*")
    assert {p.name for p in aside.iterdir()} == {
        "last.ckpt",
        "last.ckpt.sha256",
        "metrics.csv",
        "summary.json",
    }
    assert metric_rows(aside / "metrics.csv") == metric_rows(tmp_path / "metrics.csv")


def test_same_command_twice_gives_identical_curves(tmp_path, tiny_run, compose_cfg):
    over = [*tiny_run, "model.dropout=0.1", "trainer.max_steps=6", "optim.warmup_steps=2"]
    for name in ("a", "b"):
        train.run(compose_cfg([*over, f"run_dir={tmp_path / name}"]))
    a, b = (metric_rows(tmp_path / n / "metrics.csv") for n in ("a", "b"))
    assert a == b and sum(k == "train/loss" for _, k in a) == 6


def dies_half_way(obj, f, *args, **kwargs):
    f.write(b"PK\x03\x04 half a checkpoint")
    raise KeyboardInterrupt  # as if the process were killed mid-write


def disk_full(obj, f, *args, **kwargs):
    f.write(b"partial")
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize(
    "fault,error", [(dies_half_way, KeyboardInterrupt), (disk_full, DiskError)]
)
def test_checkpoint_write_is_all_or_nothing(fault, error, tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": 1}, path)
    monkeypatch.setattr(torch, "save", fault)
    with pytest.raises(error) as err:
        io.save_checkpoint({"step": 2}, path)
    monkeypatch.undo()
    assert torch.load(path, weights_only=True) == {"step": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "last.ckpt",
        "last.ckpt.sha256",
    ]  # no .tmp
    if error is DiskError:  # one line naming the directory and the fix
        message = str(err.value)
        assert "\n" not in message and str(tmp_path) in message and "free space" in message


def test_metrics_rows_written_after_the_checkpoint_are_dropped(tmp_path):
    path = tmp_path / "metrics.csv"
    rows = "a,step,val/loss\n1,0,\n,1,2.0\n3,2,\n,2,4.0\n5,3,\n"
    path.write_text(rows)
    assert keep_rows_below(path, 2) == ["a", "step", "val/loss"]
    assert path.read_text().splitlines() == ["a,step,val/loss", "1,0,", ",1,2.0"]
    path.write_text(rows)  # a checkpoint after step 2's validation keeps that val row
    keep_rows_below(path, 2, val_done_at=2)
    assert path.read_text().splitlines() == ["a,step,val/loss", "1,0,", ",1,2.0", ",2,4.0"]
    assert keep_rows_below(path, 0) == [] and not path.exists()


# ---------------------------------------------------------------- bad input: one line, no success


@pytest.fixture(scope="module")
def other_checkpoint(tmp_path_factory) -> Path:
    """A finished run's checkpoint of a model with n_embd=16 (these tests use 32)."""
    from hydra import compose, initialize_config_dir

    run_dir = tmp_path_factory.mktemp("other")
    over = ["model.n_layer=1", "model.n_embd=16", "model.n_head=2", "model.block_size=16"]
    over += ["data.batch_size=2", "data.val_batches=1", "trainer.max_steps=1"]
    over += ["optim.warmup_steps=0", "logger=csv", "num_threads=1", f"run_dir={run_dir}"]
    over += ["trainer.enable_progress_bar=false", "trainer.enable_model_summary=false"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        train.run(compose(config_name="config", overrides=over))
    return run_dir


def text_file(tmp: Path, name: str, content: bytes) -> str:
    (tmp / name).write_bytes(content)
    return str(tmp / name)


def image_dataset_with_other_columns(tmp: Path) -> str:
    import datasets

    for split in ("train", "test"):
        rows = {"img": [[0.0] * 4] * 4, "lbl": [0, 1, 0, 1]}
        datasets.Dataset.from_dict(rows).to_parquet(str(tmp / "imgs" / f"{split}.parquet"))
    return str(tmp / "imgs")


# (overrides, a fragment the one line must contain: it names the problem or the fix)
BAD = {
    "n_embd % n_head": (["model.n_head=3"], "multiple of n_head"),
    "image % patch": (["model=vit", "model.patch_size=3"], "patch size that divides"),
    "block_size > data": (
        ["data.max_chars=3000", "model.block_size=2000"],
        "lower model.block_size",
    ),
    "depth 0": (["model.n_layer=0"], "model.n_layer must be a positive integer"),
    "width 0": (["model.n_embd=0"], "model.n_embd must be a positive integer"),
    "steps 0": (["trainer.max_steps=0"], "trainer.max_steps must be a positive integer"),
    "batch 0": (["data.batch_size=0"], "data.batch_size"),
    "lr 0": (["optim.lr=0"], "lr > 0"),
    "lr < 0": (["optim.lr=-1e-3"], "lr > 0"),
    "warmup > run, strict": (
        ["optim.warmup_steps=10", "optim.strict_warmup=true"],
        "lower optim.warmup_steps",
    ),
    "deepnorm alpha": (["placement=deepnorm", "placement.alpha=0"], "positive number"),
    "deepnorm beta": (["placement=deepnorm", "placement.beta=-1"], "positive number"),
    "batchnorm in gpt": (["norm=batchnorm"], "leaks future tokens"),
    "missing file": (["data=text_files", "data.paths=[{tmp}/nope.txt]"], "fix data.paths"),
    "empty file": (["data=text_files", "data.paths=[{empty}]"], "empty"),
    "undecodable": (["data=text_files", "data.paths=[{latin1}]"], "convert the files to UTF-8"),
    "image columns": (["model=vit", "data=hf_image", "data.hf_id={imgs}"], "data.image_column"),
    "hub offline": (["data=hf_text"], "go online, or use data=text_files"),
    "corrupt checkpoint": (["ckpt_path={garbage}"], "no digest file (garbage.ckpt.sha256)"),
    "checkpoint of another model": (["ckpt_path={other}"], "ckpt_path continues a run"),
    "other settings in the run dir": (["run_dir={other_dir}"], "resume=false"),
    "wandb online, no network": (["logger=wandb", "logger.wandb.mode=online"], "mode=offline"),
    "unknown root key": (["+placment=post"], "'placment' (did you mean placement?)"),
    "lr a list": (["optim.lr=[1,2]"], "optim.lr=[1, 2] must be of type float"),
    "lr a word": (["optim.lr=abc"], "optim.lr='abc' must be of type float"),
    "seed a float": (["seed=1.5"], "seed=1.5 must be of type int"),
    "batch a float": (["data.batch_size=1e9"], "data.batch_size must be an integer"),
    "threads < 1": (["num_threads=-1"], "num_threads must be in [1, "),
    "warmup a float": (["optim.warmup_steps=2.5"], "optim.warmup_steps must be an integer"),
    "probe interval a word": (["+probes.every.grad_norm=often"], "probes.every"),
    "NUL corpus": (["data=text_files", "data.paths=[{nul}]"], "data.paths"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_exits_with_one_line_and_no_claim_of_success(
    case, tmp_path, tiny_run, compose_cfg, other_checkpoint
):
    overrides, fragment = BAD[case]
    (tmp_path / "imgs").mkdir()
    paths = {
        "tmp": tmp_path,
        "empty": text_file(tmp_path, "empty.txt", b""),
        "latin1": text_file(tmp_path, "latin1.txt", "café crème ".encode("latin-1") * 50),
        "nul": text_file(tmp_path, "nul.txt", b"\x00" * 5000),
        "imgs": image_dataset_with_other_columns(tmp_path) if "imgs}" in str(overrides) else "",
        "garbage": text_file(tmp_path, "garbage.ckpt", b"not a checkpoint"),
        "other": other_checkpoint / "last.ckpt",
        "other_dir": other_checkpoint,
    }
    run_dir = tmp_path / "run"
    over = [o.format(**paths) for o in overrides]
    if "model=vit" in over:  # the ViT has no context length; its data has no val_batches
        tiny_run = [o for o in tiny_run if not o.startswith(("model.block_size", "data.val_b"))]
    over = [*tiny_run, f"run_dir={run_dir}", *over]  # a later run_dir= replaces this one
    run_dir = Path(next(o for o in reversed(over) if o.startswith("run_dir=")).split("=", 1)[1])
    before = (run_dir / "summary.json").read_text() if (run_dir / "summary.json").exists() else None
    cfg = compose_cfg(over)
    start = time.monotonic()
    with pytest.raises(SystemExit) as exit_:
        train.main(cfg)  # Hydra's entry, as the command line calls it
    seconds = time.monotonic() - start
    line = str(exit_.value.code)
    assert line.startswith("error: ") and "\n" not in line and fragment in line, line
    assert seconds < 15, f"{case}: {seconds:.1f} s"
    summary = run_dir / "summary.json"
    if before is not None:  # a finished run dir is left exactly as it was
        assert summary.read_text() == before
    else:
        assert not summary.exists() or json.loads(summary.read_text())["status"] == "failed"


def test_debug_flag_shows_the_traceback_instead(tmp_path, tiny_run, compose_cfg):
    cfg = compose_cfg([*tiny_run, "model.n_head=3", "debug=true", f"run_dir={tmp_path}"])
    with pytest.raises(ConfigError, match="not divisible") as err:
        train.main(cfg)
    assert isinstance(err.value.__cause__, ValueError)  # the chain back to the model config


@pytest.mark.parametrize("group", ["model", "placement", "norm", "data", "logger", "experiment"])
def test_unknown_group_option_names_the_valid_ones(group):
    with pytest.raises(ChoiceError) as err:
        check_choices(["model.n_layer=2", f"{group}=nope", "-m"])
    message = str(err.value)
    assert "\n" not in message and f"unknown {group} 'nope'" in message
    assert all(option in message for option in group_options(group))
    with pytest.raises(ChoiceError, match="unknown placement 'nope'"):
        check_choices(["placement=post,nope"])  # a sweep's values too
    check_choices(["placement=post,pre", "norm=rmsnorm", "+probes.every.grad_norm=2", "a=b=c"])


def test_bad_input_on_the_command_line_prints_one_line(tmp_path):
    start = time.monotonic()
    proc = python("placement=sandwhich", f"hydra.run.dir={tmp_path / 'a'}")
    name_s = time.monotonic() - start
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "error: unknown placement 'sandwhich' (did you mean placement=sandwich?); choose one of: "
        f"{', '.join(group_options('placement'))} (placement=<name>)"
    ]
    assert not (tmp_path / "a").exists()
    start = time.monotonic()
    proc = python("model.n_head=5", "logger=csv", f"hydra.run.dir={tmp_path / 'b'}")
    value_s = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: model.n_embd=128 is not divisible by model.n_head=5")
    assert not (tmp_path / "b" / "summary.json").exists()  # refused before the run dir opens
    print(f"unknown name: {name_s:.1f} s, bad value: {value_s:.1f} s (interpreter and imports)")


# ---------------------------------------------------------------- a sweep that loses a job


@pytest.mark.slow  # 35 s, three sweeps; fast versions: a failed job's summary (test_train.py),
# skip and resume=false (test_rerun_skips_a_finished_run...), the status line (test_sweep_dirs.py)
def test_a_failed_job_does_not_stop_the_sweep_and_a_rerun_resumes_it(tmp_path, tiny_run):
    from analysis.report import write_report

    sweep = ["-m", *tiny_run, "model.n_head=3,2", "optim.lr=0.002", f"hydra.sweep.dir={tmp_path}"]
    proc = python(*sweep)
    assert proc.returncode == 1, proc.stderr[-3000:]  # the sweep ran to the end, then says so
    names = sorted(p.parent.name for p in tmp_path.glob("*/summary.json"))
    # named by what varies (the sweep's n_head replaces tiny_run's), the seed and depth always;
    # what every job shares is in the sweep dir's .constants.json, not in the names
    assert names == [f"model.n_head={h},model.n_layer=1,seed=0" for h in (2, 3)]
    shared = json.loads((tmp_path / ".constants.json").read_text())
    assert shared["optim.lr"] == "optim.lr=0.002" and "model.n_head" not in shared
    done, failed = (json.loads((tmp_path / n / "summary.json").read_text()) for n in names)
    assert failed["status"] == "failed" and "not divisible by model.n_head=3" in failed["error"]
    assert done["status"] == "completed" and done["steps"] == 3
    assert f"sweep {tmp_path}: 1 completed, 1 failed" in proc.stdout

    again = python(*sweep, "num_threads=2")  # same runs, other threads: the finished one skipped
    assert again.returncode == 1
    assert f"skip {tmp_path / names[0]}: already completed" in again.stdout
    assert f"sweep {tmp_path}: 1 failed, 1 skipped" in again.stdout
    assert json.loads((tmp_path / names[0] / "summary.json").read_text()) == done

    more = python(*sweep, "seed=0,1")  # one more seed: seed 0's dirs are the same dirs
    assert f"sweep {tmp_path}: 1 completed, 2 failed, 1 skipped" in more.stdout
    assert len(list(tmp_path.glob("*/summary.json"))) == 4

    # Other settings in the same dir (a hand-set subdir here; an edited experiment file does
    # the same): the finished job is refused and keeps every file as it was.
    config = (tmp_path / names[0] / ".hydra" / "config.yaml").read_text()
    single = [a for a in sweep if a != "model.n_head=3,2"]
    changed = python(*single, "model.dropout=0.1", f"hydra.sweep.subdir='{names[0]}'")
    assert changed.returncode == 1 and f"sweep {tmp_path}: 1 refused" in changed.stdout
    assert (tmp_path / names[0] / ".hydra" / "config.yaml").read_text() == config
    assert json.loads((tmp_path / names[0] / "summary.json").read_text()) == done

    report = write_report(tmp_path, plots=False)
    records = [r for v in report["variants"] for r in v["runs"]]
    assert sorted(r["status"] for r in records) == ["completed"] * 2 + ["failed"] * 2
    assert any("n_head=3" in r.get("error", "") for r in records)
