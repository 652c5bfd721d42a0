"""scripts/migrate.py: run dirs in each older layout come out in the current one, read by the
readers that accept nothing else; a current run dir is left byte-identical; a second pass
changes nothing."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
import yaml

from analysis.init_probes import probe_records
from models.config import GPTConfig, NormConfig, PlacementConfig
from models.gpt import GPT
from scripts import migrate
from training.reliability.checkpoints import digest_path, verify


def old_run_dir(path: Path, placement: str = "rezero") -> Path:
    """A run dir as code before the placement and norm groups wrote it."""
    (path / ".hydra").mkdir(parents=True)
    config = {
        "seed": 0,
        "model": {"name": "gpt", "n_layer": 2, "placement": placement, "norm": "rmsnorm",
                  "deepnorm_alpha": 1.5, "norm_eps": 1e-6},
        "optim": {"lr": 1e-3},
    }  # fmt: skip
    (path / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    run_config = {"model.n_layer": 2, "model.placement": placement, "model.norm_eps": 1e-6}
    summary = {"status": "completed", "run_config": run_config}
    (path / "summary.json").write_text(json.dumps(summary))
    (path / "probe.json").write_text(json.dumps([{"placement": "post", "n_layer": 2}]))
    return path


def test_old_config_records_come_out_in_the_group_layout(tmp_path: Path, capsys) -> None:
    run = old_run_dir(tmp_path / "sweep" / "a")
    assert migrate.main([str(tmp_path / "sweep")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 run dir changed"
    config = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
    assert config["model"] == {"name": "gpt", "n_layer": 2}
    assert config["placement"] == {"name": "rezero", "alpha": 1.5, "gates": "sublayer"}
    assert config["norm"] == {"name": "rmsnorm", "eps": 1e-6}
    run_config = json.loads((run / "summary.json").read_text())["run_config"]
    assert run_config == {
        "model.n_layer": 2,
        "placement.name": "rezero",
        "norm.eps": 1e-6,
        "placement.gates": "sublayer",  # what ReZero ran before the key existed
    }
    records, _ = probe_records(json.loads((run / "probe.json").read_text()))
    assert records == [{"placement": "post", "n_layer": 2}]
    assert migrate.probe_record({"model": "gpt", "records": records}) == {
        "model": "gpt",
        "runs": records,
    }
    assert migrate.probe_record({"placement": "pre"}) == {"runs": [{"placement": "pre"}]}
    # A second pass finds everything current.
    assert migrate.main([str(tmp_path / "sweep")]) == 0
    assert capsys.readouterr().out.strip() == "0 run dirs changed"


def test_only_rezero_records_get_the_old_gate_count(tmp_path: Path) -> None:
    run = old_run_dir(tmp_path / "b", placement="pre")
    migrate.main([str(run)])
    config = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
    assert "gates" not in config["placement"]
    assert "placement.gates" not in json.loads((run / "summary.json").read_text())["run_config"]


def test_a_dry_run_changes_nothing(tmp_path: Path, capsys) -> None:
    run = old_run_dir(tmp_path / "c")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert migrate.main([str(run), "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 run dir would change"
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_an_old_checkpoint_loads_as_the_model_it_was(tmp_path: Path) -> None:
    """Flat model config, DyT's 0-dim alpha, no digest file: after the migration the saved
    config builds the same GPTConfig, the weights load into it, and the digest verifies."""
    norm = NormConfig(name="dyt", alpha=0.7)
    cfg = GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_embd=16, n_head=2,
                    placement=PlacementConfig(name="deepnorm"), norm=norm)  # fmt: skip
    model = GPT(cfg)
    flat = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("placement", "norm")}
    flat.update(placement="deepnorm", deepnorm_alpha=None, deepnorm_beta=None, mix_fraction=0.25)
    flat.update(norm="dyt", norm_eps=1e-5, dyt_alpha=0.7, norm_groups=8)
    state = {
        k: (v.reshape(()) if k.endswith(".alpha") else v) for k, v in model.state_dict().items()
    }
    assert any(v.dim() == 0 for k, v in state.items() if k.endswith(".alpha"))
    path = tmp_path / "run" / "last.ckpt"
    path.parent.mkdir()
    ckpt = {"state_dict": state, "global_step": 3, "hyper_parameters": {"model_config": flat}}
    torch.save(ckpt, path)
    with pytest.raises(ValueError, match="no digest file .* python -m scripts.migrate"):
        verify(path)
    migrate.main([str(path.parent)])
    verify(path)  # recorded with the rewrite
    assert digest_path(path).is_file()
    saved = torch.load(path, weights_only=True)
    assert GPTConfig(**saved["hyper_parameters"]["model_config"]) == cfg
    fresh = GPT(cfg)
    fresh.load_state_dict(saved["state_dict"])  # strict: every name and shape fits
    for name, value in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], value), name


def test_a_current_checkpoint_without_a_digest_gets_one_and_stays_the_same(tmp_path: Path):
    path = tmp_path / "run" / "last.ckpt"
    path.parent.mkdir()
    cfg = GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_embd=16, n_head=2)
    hp = {"model_config": dataclasses.asdict(cfg)}
    torch.save(
        {"state_dict": GPT(cfg).state_dict(), "global_step": 1, "hyper_parameters": hp}, path
    )
    before = path.read_bytes()
    migrate.main([str(path.parent)])
    assert path.read_bytes() == before
    verify(path)
