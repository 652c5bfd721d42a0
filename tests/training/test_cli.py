"""The command line a researcher types: Hydra's shell completion, nested typos and a GPU
trainer without a GPU answered in one line before anything runs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import train
from runs.errors import ConfigError
from tests.conftest import ROOT
from training.launch import overrides_of, preflight


def test_shell_completion_installs_and_answers_queries():
    env = {**os.environ, "COMP_LINE": "python train.py placement=po", "COMP_POINT": "28"}
    done = subprocess.run(
        [sys.executable, "train.py", "-sc", "query=bash"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["placement=post"]
    assert overrides_of(["-m", "-sc", "query=bash", "seed=1", "--cfg", "job"]) == ["seed=1"]


@pytest.mark.parametrize(
    "arg,line",
    [
        ("model.nlayer=4", "unknown setting 'model.nlayer' (did you mean model.n_layer?)"),
        ("optim.lrr=1e-3", "unknown setting 'optim.lrr' (did you mean optim.lr?)"),
        ("trainer.max_step=3", "(did you mean trainer.max_steps?)"),
        ("placement.alpah=2", "(did you mean placement.alpha?)"),
    ],
)
def test_a_nested_typo_is_one_line_naming_the_key(arg, line):
    with pytest.raises(SystemExit) as err:
        preflight([arg])
    message = str(err.value)
    assert line in message and "\n" not in message and "+" not in message.split(";")[0]


def test_completion_works_in_the_readmes_form(tmp_path):
    """`.venv/bin/python train.py` (the README's form): the installed script treats any path to
    a Python as python, the query reads the line as `python train.py ...`, and a query without
    COMP_LINE (not from the shell) is one line."""
    install = subprocess.run(
        [sys.executable, "train.py", "-sc", "install=bash"], cwd=ROOT, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert install.returncode == 0 and "=~ ^python[0-9.]*$" in install.stdout
    script = tmp_path / "complete.sh"
    script.write_text(
        f'cd {ROOT}\neval "$(cat {tmp_path / "install.sh"})"\n'
        f'COMP_LINE="{sys.executable} train.py placement=po"; COMP_POINT=${{#COMP_LINE}}\n'
        "COMP_WORDS=($COMP_LINE); COMP_CWORD=2\nhydra_bash_completion\n"
        'echo "REPLY: ${COMPREPLY[*]}"\n'
    )
    (tmp_path / "install.sh").write_text(install.stdout)
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120)
    assert "REPLY: placement=post" in done.stdout, done.stdout + done.stderr
    env = {k: v for k, v in os.environ.items() if k != "COMP_LINE"}
    bare = subprocess.run(
        [sys.executable, "train.py", "-sc", "query=bash"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bare.returncode != 0 and bare.stderr.count("\n") == 1 and "COMP_LINE" in bare.stderr
    assert "Traceback" not in bare.stderr


@pytest.mark.parametrize(
    "args,line",
    [
        (["placement.alpha=2"], "placement=pre has no setting 'alpha'"),
        (["placement=post", "placement.beta=1"], "placement=post has no setting 'beta'"),
        (["param=sp", "+param.base_width=64"], "param=sp has no setting 'base_width'"),
        (["-m", "param=sp", "++param.base_width=64"], "param=sp has no setting 'base_width'"),
        (["model=vit", "model.block_size=64"], "model=vit has no setting 'block_size'"),
    ],
)
def test_a_key_the_chosen_option_lacks_is_one_line(args, line):
    with pytest.raises(SystemExit) as err:
        preflight(args)
    message = str(err.value)
    assert line in message and "\n" not in message and "options with" in message


def test_valid_nested_keys_pass():
    preflight(["model.n_layer=4", "norm.eps=1e-6", "data.batch_size=8"])
    preflight(["placement=deepnorm", "placement.alpha=2"])
    preflight(["model=vit", "model.patch_size=2", "trainer.gradient_clip_val=1.0"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_a_gpu_trainer_without_a_gpu_is_one_line(tmp_path, tiny_run, compose_cfg):
    with pytest.raises(ConfigError, match=r"trainer=gpu needs a CUDA GPU.*use trainer=cpu"):
        train.run(compose_cfg([*tiny_run, "trainer=gpu", f"run_dir={tmp_path}"]))
    assert not (tmp_path / "summary.json").exists()  # refused before the run dir was opened


@pytest.mark.parametrize(
    "args,line",
    [
        (["param=mup", "optim=sgd"], r"param=mup scales Adam-type.*use optim=adamw"),
        (["param=completep", "optim=muon"], r"param=completep scales Adam-type.*or param=sp"),
        (["param=mup", "placement=ngpt"], r"nGPT keeps its weights on the unit sphere.*param=sp"),
    ],
)
def test_a_parametrization_outside_its_rules_is_one_line(tmp_path, tiny_run, compose_cfg, args,
                                                         line):  # fmt: skip
    """The command line's check (train.py main, before torch loads and before the run dir)."""
    with pytest.raises((ConfigError, ValueError), match=line) as err:
        train.check_config(compose_cfg([*tiny_run, *args, f"run_dir={tmp_path}"]))
    assert "\n" not in str(err.value)


def test_a_run_prints_a_header_the_progress_and_a_final_line(tmp_path, tiny_run):
    """No Lightning banner, tips, model-summary table or wandb warnings: one header line, the
    progress (lines here: not a terminal) and the final line with wall time, speed and MFU."""
    over = [o for o in tiny_run if not o.startswith(("logger=", "trainer.enable_progress_bar"))]
    done = subprocess.run(
        [sys.executable, "train.py", *over, f"hydra.run.dir={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "WANDB_MODE": "offline"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    text = done.stdout + done.stderr
    for noise in ("GPU available", "Tip:", "wandb: WARNING", "Total FLOPs", "Trainable params"):
        assert noise not in text, noise
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    # the conf's GPT has QK-norm on: the header says so, as it changes what "pre" trains
    head = "gpt-pre-layernorm-L1-lr0.005-s0: gpt pre/layernorm +qk-norm L1 d32, "
    assert lines[0].startswith(head)
    assert lines[0].endswith("64 tokens/step, 3 steps, cpu 32-true, 1 thread")
    assert lines[-1].startswith("val_loss=") and " mfu=" in lines[-1] and " wall=" in lines[-1]


def test_help_lists_the_groups_a_user_picks_from(compose_cfg):
    from training.launch import help_groups

    lines = dict(line.split(": ", 1) for line in help_groups().splitlines())
    groups = {"data", "experiment", "hparams_search", "logger", "model", "norm", "optim"}
    assert set(lines) == groups | {"param", "placement", "trainer"}
    assert lines["placement"].startswith("admin, b2t, deepnorm") and "size" not in lines


@pytest.mark.parametrize("args", [["--help"], ["model.nlayer=2"], ["placement=nope"]])
def test_help_and_command_line_errors_answer_before_torch_loads(args):
    code = (
        "import atexit, runpy, sys\n"
        "atexit.register(lambda: print('torch' in sys.modules, file=sys.stderr))\n"
        f"sys.argv = ['train.py', *{args!r}]\n"
        "runpy.run_path('train.py', run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.stderr.strip().splitlines()[-1] == "False", done.stderr[-2000:]
    assert done.returncode == (0 if args == ["--help"] else 1)


def test_placement_peri_selects_the_sandwich_computation(compose_cfg):
    """docs/variants.md offers `peri` as sandwich's other name: it composes, and records what
    it computes (placement=sandwich)."""
    assert (
        compose_cfg(["placement=peri"]).placement == compose_cfg(["placement=sandwich"]).placement
    )
