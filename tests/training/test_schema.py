"""The config's root declared once (runs/schema.py): conf/ holds exactly its keys, each of
its kind; the operational settings, the root check and the command line's preflight derive from
it; every section is checked key by key, reproduce included."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from analysis.findings.settings import read_reproduce
from runs.errors import ConfigError
from runs.schema import ROOT, check_top_level, keys_of
from runs.settings import OPERATIONAL, is_operational
from training.launch import NOT_OPTIONS, preflight

CONF = Path(__file__).resolve().parents[2] / "conf"


def test_conf_holds_exactly_the_schemas_root_keys() -> None:
    root = yaml.safe_load((CONF / "config.yaml").read_text())
    for key, value in root.items():
        if key == "defaults":
            continue
        kind = ROOT[key].kind  # a KeyError names a key the schema lacks
        assert kind == ("package" if key == "hydra" else "section" if isinstance(value, dict)
                        else "scalar"), key  # fmt: skip
    dirs = {p.name for p in CONF.iterdir() if p.is_dir()} - set(NOT_OPTIONS)
    for name in dirs:
        global_ = all(
            f.read_text().startswith("# @package _global_") for f in (CONF / name).glob("*.yaml")
        )
        assert ROOT[name].kind == ("package" if global_ or name == "hydra" else "group"), name
    # every root key comes from conf/config.yaml, a group folder, or an experiment (reproduce)
    experiments = [yaml.safe_load(f.read_text()) for f in (CONF / "experiment").glob("*.yaml")]
    from_experiments = {k for e in experiments for k in e if k != "defaults"}
    assert set(ROOT) == (set(root) - {"defaults"}) | dirs | (from_experiments & {"reproduce"})
    assert from_experiments <= set(ROOT)


def test_the_operational_settings_derive_from_the_schema() -> None:
    assert set(OPERATIONAL) >= {"logger", "probes", "trainer.accelerator", "data.cache_dir"}
    assert is_operational("logger.wandb.mode") and is_operational("num_threads")
    assert not any(map(is_operational, ("seed", "optim.lr", "trainer.max_steps", "data.source")))
    assert not is_operational("divergence.loss_factor")  # when a run stops is part of its result
    assert set(keys_of("scalar")) == {k for k, key in ROOT.items() if key.type is not None}


def test_the_root_check_and_the_preflight_read_the_same_keys(compose_cfg, tmp_path) -> None:
    cfg = compose_cfg(["experiment=f3_depth", f"run_dir={tmp_path}"])
    check_top_level(cfg)  # reproduce, an experiment's section, is a root key like the others
    with pytest.raises(SystemExit, match=r"unknown setting 'reproduc'.*did you mean reproduce"):
        preflight(["reproduc.widen=[]"])
    preflight(["reproduce.ref_lr=1e-3"])  # the preflight knows it too


def test_reproduce_is_checked_key_by_key_by_its_reader(compose_cfg, tmp_path) -> None:
    base = ["experiment=f3_depth", f"run_dir={tmp_path}"]
    read = read_reproduce(compose_cfg(base))
    assert (read.max_steps, read.lr, read.ref_lr) == (400, 1e-3, None)  # the run's, filled in
    with pytest.raises(ConfigError, match=r"reproduce\.wident is not a setting .*widen"):
        read_reproduce(compose_cfg([*base, "+reproduce.wident=[]"]))
    with pytest.raises(ConfigError, match=r"reproduce\.confirm\.sed is not a setting .*seeds"):
        read_reproduce(compose_cfg([*base, "+reproduce.confirm.sed=[1]"]))
    with pytest.raises(ConfigError, match=r"reproduce\.ref_lr='x' must be of type"):
        read_reproduce(compose_cfg([*base, "+reproduce.ref_lr=x"]))
    with pytest.raises(ConfigError, match=r"reproduce\.lr is not read from .* optim\.lr=1"):
        read_reproduce(compose_cfg([*base, "+reproduce.lr=1"]))


def test_every_value_is_checked_before_torch_loads() -> None:
    """A bad value answers as a typo does: check_config (what train.py runs before the build)
    refuses it without importing torch or Lightning."""
    import subprocess
    import sys

    code = f"""
import sys
from hydra import compose, initialize_config_dir
from runs.errors import ConfigError
from training.run_config import check_config
bad = [["model.n_layer=0"], ["norm=groupnorm", "norm.groups=5"], ["optim.lr=abc"],
       ["norm=dyt", "norm.alpha=-1"], ["model.activation=tanh"], ["probes.enabled=[nope]"],
       ["divergence.loss_factor=0.5"], ["model=vit", "model.pool=max"]]
with initialize_config_dir(config_dir={str(CONF)!r}, version_base="1.3"):
    check_config(compose(config_name="config", overrides=["run_dir=-"]))
    for overrides in bad:
        try:
            check_config(compose(config_name="config", overrides=["run_dir=-", *overrides]))
            print("accepted", overrides)
        except ConfigError as err:
            print("refused:", err)
print("torch" in sys.modules, "lightning" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == "False False", out.stdout
    assert len(lines) == 9 and all(line.startswith("refused: ") for line in lines[:-1]), lines
    assert "norm.groups=5 does not divide the feature size 128" in lines[1]
    assert "unknown pool 'max'" in lines[7]
