"""Runs people reuse: a quick first run, checkpoints that describe themselves, sampling, a plain
Lightning Trainer, wandb's grouping, and loggers and callbacks added from the config."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import lightning.pytorch as L
import pytest
import torch
from omegaconf import OmegaConf

import train
from data.config import TextDataConfig
from data.text import TextDataModule
from data.tokenizer import load_vocab
from models.gpt import GPT, GPTConfig
from runs.errors import ConfigError
from scripts import evaluate, sample
from training.build import build_callbacks
from training.loggers import build_loggers, job_type
from training.run_config import typed_config
from training.task import ImageClassificationTask, LanguageModelTask, OptimConfig

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory):
    """A finished tiny GPT run's directory."""
    from hydra import compose, initialize_config_dir

    from tests.conftest import CONF, TINY_RUN

    run_dir = tmp_path_factory.mktemp("gpt")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*TINY_RUN, f"run_dir={run_dir}"])
    threads = torch.get_num_threads()
    train.run(cfg)
    torch.set_num_threads(threads)
    return run_dir


def test_a_run_shorter_than_its_warmup_clamps_it_with_one_warning(
    tmp_path, tiny_run, compose_cfg, capsys
):
    over = [*tiny_run, "optim.warmup_steps=50", f"run_dir={tmp_path}"]
    summary = train.run(compose_cfg(over))
    out = capsys.readouterr().out
    assert out.count("warning: optim.warmup_steps=50 is longer than the run") == 1
    assert summary["status"] == "completed" and summary["warmup_steps"] == 1  # max(1, 3 // 10)


def test_checkpoints_load_with_load_from_checkpoint(gpt_run, tmp_path, tiny_run, compose_cfg):
    task = LanguageModelTask.load_from_checkpoint(gpt_run / "last.ckpt", map_location="cpu")
    saved = torch.load(gpt_run / "last.ckpt", weights_only=True)["state_dict"]
    assert task.model.cfg.n_embd == 32 and task.optim.lr == 5e-3
    for key, value in task.state_dict().items():
        assert torch.equal(value, saved[key]), key
    vit = [o for o in tiny_run if not o.startswith(("model.block_size", "data.val_b"))]
    train.run(compose_cfg([*vit, "model=vit", f"run_dir={tmp_path}"]))
    task = ImageClassificationTask.load_from_checkpoint(tmp_path / "last.ckpt", map_location="cpu")
    assert task.model.cfg.image_size == 8 and task.model.cfg.num_classes == 10


def test_evaluate_gives_back_the_final_validation(gpt_run, tmp_path, tiny_run, compose_cfg):
    """scripts.evaluate on a finished run's last.ckpt: the run's own val set, so the numbers of
    its summary.json (GPT: loss and bpb; ViT: loss and accuracy)."""
    summary = json.loads((gpt_run / "summary.json").read_text())
    got = evaluate.evaluate(gpt_run, threads=1)
    assert got["val/loss"] == pytest.approx(summary["final_val_loss"], rel=1e-6)
    assert got["val/bpb"] == pytest.approx(summary["final_val_bpb"], rel=1e-6)
    vit = [o for o in tiny_run if not o.startswith(("model.block_size", "data.val_b"))]
    summary = train.run(compose_cfg([*vit, "model=vit", f"run_dir={tmp_path}"]))
    got = evaluate.main([str(tmp_path), "--threads", "1", "--json"])
    assert set(got) == {"val/loss", "val/acc"}
    assert got["val/loss"] == pytest.approx(summary["final_val_loss"], rel=1e-6)
    assert got["val/acc"] == pytest.approx(summary["final_val_acc"], rel=1e-6)
    with pytest.raises(ConfigError, match="does not exist"):  # main: one line, exit 1
        evaluate.evaluate(tmp_path, ckpt=tmp_path / "nope.ckpt")


def test_sample_is_seeded_and_greedy_sampling_is_the_argmax(gpt_run, capsys):
    text = sample.main([str(gpt_run), "--prompt", "The ", "--tokens", "12", "--seed", "3"])
    assert text.startswith("The ") and len(text) == 4 + 12
    assert sample.main([str(gpt_run), "--prompt", "The ", "--tokens", "12", "--seed", "3"]) == text
    # top-k 1 is greedy decoding: compare with an argmax loop written out here.
    greedy = sample.main([str(gpt_run), "--prompt", "The ", "--tokens", "6", "--top-k", "1"])
    model, vocab = sample.load_model(gpt_run).eval(), load_vocab(gpt_run / "vocab.json")
    idx = vocab.encode("The ")[None, :]
    with torch.no_grad():
        for _ in range(6):
            logits, _ = model(idx[:, -model.cfg.block_size :])
            idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert greedy == vocab.decode(idx[0])


def test_sample_loads_the_model_lightning_loads_without_importing_lightning(gpt_run):
    """The model sample rebuilds from last.ckpt (torch only) is the task's model, weight for
    weight; and sampling imports neither Lightning nor transformers."""
    import subprocess
    import sys

    from training.task import LanguageModelTask

    ours = sample.load_model(gpt_run)
    theirs = LanguageModelTask.load_from_checkpoint(gpt_run / "last.ckpt", map_location="cpu")
    assert ours.cfg == theirs.model.cfg
    for name, value in theirs.model.state_dict().items():
        assert torch.equal(ours.state_dict()[name], value), name
    code = (
        "import sys; from scripts import sample; "
        f"sample.main([{str(gpt_run)!r}, '--tokens', '2']); "
        "print(sorted(m for m in ('lightning', 'transformers') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-1000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_a_plain_trainer_validates_with_the_documented_arguments(tmp_path):
    dm = TextDataModule(TextDataConfig(val_batches=1), block_size=8, batch_size=2, seed=0)
    dm.setup()
    cfg = GPTConfig(vocab_size=dm.vocab_size, block_size=8, n_layer=1, n_embd=16, n_head=2)
    quiet = dict(logger=False, enable_progress_bar=False, enable_checkpointing=False)
    task = LanguageModelTask(GPT(cfg), OptimConfig(), total_steps=2)
    with pytest.raises(ValueError, match="val_check_interval=<steps>, check_val_every_n_epoch"):
        L.Trainer(max_steps=2, default_root_dir=tmp_path, **quiet).fit(task, datamodule=dm)
    task = LanguageModelTask(GPT(cfg), OptimConfig(), total_steps=2)
    trainer = L.Trainer(
        max_steps=2, val_check_interval=2, check_val_every_n_epoch=None, **quiet
    )  # what the docs name
    trainer.fit(task, datamodule=dm)
    assert task.last_val_step == 2 and task.last_val_loss is not None


def test_wandb_groups_by_sweep_and_job_type_drops_the_seed(compose_cfg, tmp_path):
    over = ["seed=3", "model.n_layer=6", "logger=wandb", "group=study-a", f"run_dir={tmp_path}"]
    run = typed_config(compose_cfg(over))
    assert job_type(run) == "gpt-pre-layernorm-L6-lr0.005"
    (wandb,), logged = build_loggers(run, tmp_path)
    assert logged == {"wandb_group": "study-a"}  # what the run's record holds
    init = wandb._wandb_init
    assert init["group"] == "study-a" and init["job_type"] == "gpt-pre-layernorm-L6-lr0.005"
    assert init["name"] == "gpt-pre-layernorm-L6-lr0.005-s3" and "L6" in init["tags"]
    assert init["project"] == "normlab"  # the default study; study=<name> picks another
    (wandb,), _ = build_loggers(typed_config(compose_cfg([*over, "study=depth-2026"])), tmp_path)
    assert wandb._wandb_init["project"] == "depth-2026"


def test_job_type_holds_every_setting_the_name_leaves_out(compose_cfg):
    """Two settings never share a job_type (the wandb UI's group-by would average them); two
    seeds of one setting always do."""
    from training.loggers import JOB_TYPE_MAX

    sweep = ["placement=post", "num_threads=2"]
    types = {}
    for warmup in (10, 20):
        for seed in (0, 1):
            over = [*sweep, f"optim.warmup_steps={warmup}", f"seed={seed}"]
            types[warmup, seed] = job_type(typed_config(compose_cfg(over)), over)
    assert types[10, 0] == types[10, 1] != types[20, 0] == types[20, 1]
    assert types[10, 0] == "gpt-post-layernorm-L2-lr0.005 warmup_steps=10"
    long = [f"+model.x{i}=1" for i in range(20)]
    assert len(job_type(typed_config(compose_cfg([])), long)) <= JOB_TYPE_MAX


def test_a_long_job_type_keeps_whole_readable_keys_and_still_tells_settings_apart(compose_cfg):
    """Past 64 characters: the overrides that fit stay whole (short keys, short numbers), the
    rest become +N#digest; never a key cut mid-way. Settings differing only in a dropped
    override still get different job types."""
    from training.loggers import JOB_TYPE_MAX

    base = ["optim.warmup_steps=10", "trainer.max_steps=400", "optim.min_lr_ratio=1.0e-01"]
    tails = (["data.batch_size=16", "trainer.gradient_clip_val=1.0"],
             ["data.batch_size=16", "trainer.gradient_clip_val=0.5"])  # fmt: skip
    run = typed_config(compose_cfg([]))
    made = [job_type(run, [*base, *tail]) for tail in tails]
    assert made[0] != made[1] and all(len(t) <= JOB_TYPE_MAX for t in made)
    # sorted overrides, shortened: batch_size=16 fits; the other four are the digest's
    assert made[0].startswith("gpt-pre-layernorm-L2-lr0.005 batch_size=16 +4#")
    assert made[1].startswith("gpt-pre-layernorm-L2-lr0.005 batch_size=16 +4#")
    short = job_type(run, ["optim.min_lr_ratio=1.0e-01", "trainer.max_steps=400"])
    assert short == "gpt-pre-layernorm-L2-lr0.005 min_lr_ratio=0.1 max_steps=400"


def test_callbacks_from_target_entries(compose_cfg, tmp_path):
    over = ["+callbacks.stop._target_=lightning.pytorch.callbacks.EarlyStopping"]
    over += ["+callbacks.stop.monitor=val/loss", "+callbacks.stop.patience=2"]
    callbacks = build_callbacks(typed_config(compose_cfg(over)), tmp_path, {})
    assert type(callbacks[-1]).__name__ == "EarlyStopping" and callbacks[-1].patience == 2
    bad = compose_cfg(["+callbacks.stop._target_=collections.OrderedDict"])
    with pytest.raises(ConfigError, match="not a Lightning Callback"):
        build_callbacks(typed_config(bad), tmp_path, {})


@pytest.mark.skipif(not importlib.util.find_spec("tensorboard"), reason="extra not installed")
def test_tensorboard_logger_from_its_config(compose_cfg, tmp_path):
    (tb,), _ = build_loggers(typed_config(compose_cfg(["logger=tensorboard"])), tmp_path)
    tb.log_metrics({"train/loss": 1.0}, step=0)
    tb.save()
    assert list((tmp_path / "tensorboard").rglob("events.out.tfevents.*"))


def test_a_target_logger_is_built_from_the_typed_tree(compose_cfg, tmp_path):
    """Any Lightning logger by ``_target_`` (here Lightning's own CSVLogger, always installed),
    resolved and writing under the run dir, next to the built-in ones."""
    over = ["logger=csv", "+logger.mine._target_=lightning.pytorch.loggers.CSVLogger"]
    (_, mine), logged = build_loggers(
        typed_config(compose_cfg([*over, "+logger.mine.name=${name}"])), tmp_path
    )
    assert type(mine).__name__ == "CSVLogger" and mine.save_dir == str(tmp_path)
    assert mine.name == "gpt-pre-layernorm-L2-lr0.005-s0" and logged == {}  # no wandb: no group


def test_an_unknown_logger_names_the_fix(compose_cfg):
    cfg = compose_cfg([])
    cfg.logger = OmegaConf.create({"nope": {"x": 1}})
    with pytest.raises(ConfigError, match=r"unknown logger 'nope'.*_target_"):
        typed_config(cfg)  # torch-free, before any run dir opens


def test_the_wandb_sweep_command_lines_compose(compose_cfg):
    """What `wandb agent` would run: train.py with each grid point as key=value overrides."""
    import itertools

    import yaml

    from tests.conftest import ROOT
    from training.launch import preflight

    spec = yaml.safe_load((ROOT / "conf" / "wandb_sweep" / "placement_lr.yaml").read_text())
    assert spec["program"] == "train.py" and "${args_no_hyphens}" in spec["command"]
    params = spec["parameters"]
    grid = [[(k, v) for v in p.get("values", [p.get("value")])] for k, p in params.items()]
    for point in itertools.product(*grid):
        args = [f"{k}={v}" for k, v in point]  # ${args_no_hyphens}
        preflight(args)
        cfg = compose_cfg(args)
        assert (cfg.placement.name, cfg.optim.lr) == (point[0][1], point[2][1])
        assert cfg.logger.wandb.project == spec["project"]  # the runs land in the sweep's project


def test_parallel_sweep_jobs_print_lines_prefixed_by_their_variant(capsys):
    from types import SimpleNamespace

    import torch as t

    from training.reliability.progress import StepLines
    from training.threads import parallel_sweep

    assert not parallel_sweep()  # outside a Hydra multirun: the rich bar
    lines = StepLines("gpt-post-L6-s0", every=5)
    trainer = SimpleNamespace(is_global_zero=True, max_steps=10, callback_metrics={})
    for step in range(1, 11):
        trainer.global_step = step
        trainer.callback_metrics = {"train/loss": t.tensor(1.0 / step)}
        lines.on_train_batch_end(trainer, None, None, None, step - 1)
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "[gpt-post-L6-s0] step 5/10 train/loss=0.2000",
        "[gpt-post-L6-s0] step 10/10 train/loss=0.1000",
    ]


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("+checkpoint.every_n_step=5", "checkpoint.every_n_step is not a setting of "
         "CheckpointConfig (did you mean every_n_steps?)"),
        ("+init_probe.depth=[2]", "init_probe.depth is not a setting of InitProbeConfig (did you "
         "mean depths?)"),
        ("init_probe.batches=x", "init_probe.batches='x' must be of type int"),
    ],
)  # fmt: skip
def test_checkpoint_and_init_probe_sections_are_checked_like_the_rest(compose_cfg, override, said):
    """Both sections once passed any key: a typo under checkpoint changed nothing, silently."""
    with pytest.raises(ConfigError) as err:
        typed_config(compose_cfg([override]))
    assert said in str(err.value)
    assert typed_config(compose_cfg(["checkpoint.every_n_steps=7"])).checkpoint.every_n_steps == 7


@pytest.mark.parametrize("script", ["sample", "evaluate"])
def test_a_missing_run_dir_fails_in_one_line_without_importing_lightning(script, tmp_path):
    import subprocess
    import sys

    code = (
        f"import sys; from scripts import {script}\n"
        f"try:\n    {script}.main([{str(tmp_path / 'missing')!r}])\n"
        "except SystemExit as e:\n    print('exit', e.code)\n"
        "print(sorted(m for m in ('lightning', 'transformers') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], timeout=120)  # fmt: skip
    assert done.stdout.strip().splitlines()[-2:] == ["exit 1", "[]"], done.stderr[-1000:]
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error:") and "missing" in errors[0]
