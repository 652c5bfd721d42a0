"""CONTRIBUTING.md's checklists, followed literally, add a working norm and a working probe; the
config's default probes are the registry's."""

from __future__ import annotations

import csv
import math
import shutil

import pytest
import torch
from hydra import compose, initialize_config_dir
from torch import nn

import train
from models.catalog import NORMS, NormSpec
from models.gpt import GPT, GPTConfig
from runs.checks import node_to
from tests.conftest import CONF, TINY_RUN
from training.probe_config import PROBES, ProbeConfig, ProbeSpec
from training.probes.forward import ForwardMeasure

pytestmark = pytest.mark.usefixtures("one_thread")


class ScaleNorm(nn.Module):
    """ScaleNorm (Nguyen & Salazar 2019): y = g x / ||x||, one learnable scalar g = sqrt(d)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.g = nn.Parameter(torch.full((1,), math.sqrt(dim)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.g * x / x.norm(dim=-1, keepdim=True).clamp_min(self.eps)).to(x.dtype)


def conf_with(tmp_path, group: str, name: str, text: str):
    """The project's conf/ with one more option file (checklist step 2)."""
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / group / f"{name}.yaml").write_text(text)
    return conf


def test_a_toy_norm_by_the_checklist(tmp_path, monkeypatch):
    monkeypatch.setitem(NORMS, "scalenorm", NormSpec(ScaleNorm, paper="Nguyen & Salazar 2019"))
    conf = conf_with(tmp_path, "norm", "scalenorm", "name: scalenorm\neps: 1.0e-5\n")
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose("config", [*TINY_RUN, "norm=scalenorm", f"run_dir={tmp_path / 'run'}"])
    assert train.run(cfg)["status"] == "completed"
    model = GPT(GPTConfig(vocab_size=7, block_size=4, n_layer=1, n_head=2, n_embd=8,
                          norm="scalenorm"))  # fmt: skip
    x = torch.randn(2, 4, 8)
    expected = math.sqrt(8) * x / x.norm(dim=-1, keepdim=True)  # the formula, by hand
    torch.testing.assert_close(model.final_norm(x), expected)


class LogitRMS(ForwardMeasure):
    def read(self, logits, step):
        return {"toy/logit_rms": logits.float().square().mean().sqrt()}


def test_a_toy_probe_by_the_checklist(tmp_path, monkeypatch, compose_cfg):
    monkeypatch.setitem(PROBES, "toy_rms", ProbeSpec(1, "toy/logit_rms", LogitRMS))
    over = [*TINY_RUN, "probes.every={}"]
    with_probe = train.run(
        compose_cfg([*over, "probes.enabled=[toy_rms]", f"run_dir={tmp_path / 'a'}"])
    )
    without = train.run(compose_cfg([*over, "probes.enabled=[]", f"run_dir={tmp_path / 'b'}"]))
    for key in ("final_train_loss", "final_val_loss"):
        assert with_probe[key] == without[key]  # a probe leaves training bit-identical
    with open(tmp_path / "a" / "metrics.csv") as f:
        values = [float(r["toy/logit_rms"]) for r in csv.DictReader(f) if r.get("toy/logit_rms")]
    assert len(values) == 3 and all(v > 0 and math.isfinite(v) for v in values)


def test_the_config_enables_the_registrys_default_probes(compose_cfg):
    node = compose_cfg([]).probes
    assert node.enabled is None  # the list lives in the registry alone
    enabled = node_to(ProbeConfig, node, "probes").enabled
    # the costly one and the instruments are off unless named
    off = {"sharpness", "attn_sink", "massive_act", "outlier_kurtosis", "linear_out", "headroom"}
    off |= {"saturation", "spectral", "adam_state", "layer_drop", "spike_score"}
    assert enabled == [name for name in PROBES if name not in off]
