"""optim=muon: Muon on the Blocks' matrices and AdamW on the rest, against a hand-written step."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from models.gpt import GPT, GPTConfig
from runs.checks import node_to
from tests.helpers import interrupted_and_uninterrupted
from training.optim import OPTIMIZERS, Combined, hidden_matrices
from training.optim_config import OptimConfig, lr_multiplier
from training.task import TrainTask

pytestmark = pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="torch < 2.9")

TINY = dict(vocab_size=11, block_size=6, n_layer=2, n_head=2, n_embd=8)


def newton_schulz(g: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """Jordan et al. 2024's quintic iteration towards the nearest semi-orthogonal matrix."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g / (g.norm() + eps)
    wide = x.shape[0] > x.shape[1]
    x = x.T if wide else x
    for _ in range(steps):
        s = x @ x.T
        x = a * x + (b * s + c * s @ s) @ x
    return x.T if wide else x


def batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 11, (3, 6), generator=g), torch.randint(0, 11, (3, 6), generator=g)


def test_muon_takes_the_blocks_matrices_and_adamw_the_rest():
    model = GPT(GPTConfig(**TINY))
    opt = OPTIMIZERS["muon"](model, OptimConfig(name="muon"))
    muon, adam = opt.parts
    assert isinstance(opt, Combined) and isinstance(muon, torch.optim.Muon)
    names = {id(p): n for n, p in model.named_parameters()}
    on_muon = sorted(names[id(p)] for g in muon.param_groups for p in g["params"])
    assert on_muon == sorted(
        f"blocks.{i}.{m}.weight"
        for i in range(2)
        for m in (
            "attn.q_proj",
            "attn.k_proj",
            "attn.v_proj",
            "attn.out_proj",
            "mlp.fc1",
            "mlp.fc2",
        )
    )
    on_adam = {names[id(p)] for g in adam.param_groups for p in g["params"]}
    assert on_adam == set(names.values()) - set(on_muon)  # tok_emb (the tied head) among them
    assert "tok_emb.weight" in on_adam


class OneBlock(torch.nn.Module):
    def __init__(self, rows: int, cols: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(cols, rows, bias=False)])


@pytest.mark.parametrize("shape", [(8, 8), (12, 6), (6, 12)])
def test_one_muon_step_is_the_hand_written_update(shape):
    torch.manual_seed(0)
    model = OneBlock(*shape)
    w = model.blocks[0].weight
    w0 = w.detach().clone()
    cfg = OptimConfig(name="muon", lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=True)
    opt = OPTIMIZERS["muon"](model, cfg)
    w.grad = torch.randn(shape)  # well conditioned, unlike a tiny model's first gradient
    opt.step()
    # First step: the (Nesterov) momentum is a multiple of g, which the iteration normalizes;
    # the decay is lr x weight_decay; the step lr x 0.2 sqrt(max(rows, cols)) (Liu et al. 2025).
    scale = 0.2 * math.sqrt(max(shape))
    update = (w0 * (1 - 0.02 * 0.1) - w.detach()) / (0.02 * scale)
    reference = newton_schulz(w.grad)
    # torch iterates in bf16: agreement to bf16's precision (measured under 2% here)
    assert (update - reference).norm() < 0.04 * reference.norm()
    singular = torch.linalg.svdvals(update)
    assert singular.min() > 0.5 and singular.max() < 1.5  # near-orthogonal


def test_three_steps_equal_torchs_muon_and_adamw_built_by_hand():
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    twin = copy.deepcopy(model)
    cfg = OptimConfig(name="muon", lr=0.01, weight_decay=0.1, momentum=0.9, nesterov=False)
    opt = OPTIMIZERS["muon"](model, cfg)
    matrices = [p for n, p in twin.named_parameters() if n.startswith("blocks.") and p.ndim == 2]
    rest = [p for n, p in twin.named_parameters() if all(p is not q for q in matrices)]
    muon = torch.optim.Muon(
        matrices, lr=0.01, weight_decay=0.1, momentum=0.9, nesterov=False,
        adjust_lr_fn="match_rms_adamw",
    )  # fmt: skip
    adam = torch.optim.AdamW(
        [
            {"params": [p for p in rest if p.ndim >= 2], "weight_decay": 0.1},
            {"params": [p for p in rest if p.ndim < 2], "weight_decay": 0.0},
        ],
        lr=0.01, betas=(0.9, 0.95), eps=1e-8,
    )  # fmt: skip
    for step in range(3):
        for m, steppers in ((model, [opt]), (twin, [muon, adam])):
            m.zero_grad()
            m(*batch(step))[1].backward()
            for o in steppers:
                o.step()
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b)


def test_the_schedule_reaches_both_halves_and_a_reload_continues_bit_exact():
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    twin = copy.deepcopy(model)
    cfg = OptimConfig(name="muon", lr=0.01, warmup_steps=2, schedule="cosine")
    task = TrainTask(model, cfg, total_steps=6)
    setup = task.configure_optimizers()
    opt, sched = setup["optimizer"], setup["lr_scheduler"]["scheduler"]

    def train(model, opt, sched, steps):
        for s in steps:
            opt.zero_grad()
            model(*batch(s))[1].backward()
            opt.step()
            sched.step()

    train(model, opt, sched, range(3))
    expected_lr = 0.01 * lr_multiplier(3, cfg, 6)
    assert {g["lr"] for part in opt.parts for g in part.param_groups} == {expected_lr}
    saved, weights = copy.deepcopy(opt.state_dict()), copy.deepcopy(model.state_dict())
    train(model, opt, sched, range(3, 6))

    twin.load_state_dict(weights)
    task2 = TrainTask(twin, cfg, total_steps=6)
    setup2 = task2.configure_optimizers()
    opt2, sched2 = setup2["optimizer"], setup2["lr_scheduler"]["scheduler"]
    opt2.load_state_dict(saved)
    sched2.load_state_dict(sched.state_dict() | {"last_epoch": 3, "_step_count": 4})
    for group in opt2.param_groups:
        group["lr"] = expected_lr
    assert len(opt2.state) == len(opt.state) > 0
    train(twin, opt2, sched2, range(3, 6))
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b)


def test_muon_needs_blocks_and_the_config_group_composes(compose_cfg):
    with pytest.raises(ValueError, match="optim=muon needs a model with Blocks"):
        hidden_matrices(torch.nn.Linear(2, 2))
    cfg = compose_cfg(["optim=muon"])
    optim = node_to(OptimConfig, cfg.optim, "optim")
    assert (optim.name, optim.momentum, optim.nesterov) == ("muon", 0.95, True)


def test_an_interrupted_muon_run_resumes_to_the_uninterrupted_one(
    tmp_path, tiny_run, compose_cfg, monkeypatch, one_thread
):
    over = [*tiny_run, "optim=muon", "optim.warmup_steps=2", "trainer.max_steps=6"]
    # equal losses: Muon's momentum and AdamW's moments travel in the checkpoint
    interrupted_and_uninterrupted(compose_cfg, over, tmp_path, monkeypatch)


def test_with_weight_norm_muon_takes_the_directions_and_adamw_the_magnitudes():
    """weight norm's g is (out, 1): a vector, which Muon's orthogonalization would flatten."""
    model = GPT(GPTConfig(**TINY, weight_norm=True))
    muon, adam = OPTIMIZERS["muon"](model, OptimConfig(name="muon")).parts
    names = {id(p): n for n, p in model.named_parameters()}
    on_muon = [names[id(p)] for g in muon.param_groups for p in g["params"]]
    on_adam = {names[id(p)] for g in adam.param_groups for p in g["params"]}
    assert on_muon and all(n.endswith("original1") for n in on_muon)  # the directions v
    assert sum(n.endswith("original0") for n in on_adam) == len(on_muon)  # every magnitude g


def test_lr_multipliers_by_role_reach_adamws_and_muons_groups() -> None:
    """optim.emb_lr_mult / readout_lr_mult / hidden_lr_mult: read back from the optimizer, each
    parameter's lr is optim.lr times its role's multiplier, under AdamW and under Muon (whose
    Blocks' matrices are hidden, and whose AdamW half takes the embeddings and the readout)."""
    import torch

    from models.gpt import GPT, GPTConfig
    from training.optim import build_adamw, build_muon, role_of
    from training.optim_config import OptimConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=23, block_size=8, n_layer=2, n_head=2, n_embd=16,
                          tie_weights=False))  # fmt: skip
    mults = {"emb": 4.0, "readout": 0.5, "hidden": 2.0}
    cfg = OptimConfig(lr=1e-3, emb_lr_mult=4.0, readout_lr_mult=0.5, hidden_lr_mult=2.0)
    assert cfg.lr_mults == mults and cfg.read()["emb_lr_mult"] == 4.0
    assert "emb_lr_mult" not in OptimConfig().read()  # an unset multiplier records nothing
    names = {id(p): n for n, p in model.named_parameters()}
    assert {role_of(n) for n in names.values()} == {"emb", "readout", "hidden"}
    for opt in (build_adamw(model, cfg), build_muon(model, cfg)):
        parts = getattr(opt, "parts", [opt])
        lr_of = {id(p): g["lr"] for o in parts for g in o.param_groups for p in g["params"]}
        assert set(lr_of) == set(names)
        for pid, name in names.items():
            assert lr_of[pid] == pytest.approx(1e-3 * mults[role_of(name)]), name
    with pytest.raises(ValueError, match="model.tie_weights=false"):
        tied = GPT(GPTConfig(vocab_size=23, block_size=8, n_layer=1, n_head=2, n_embd=16))
        build_adamw(tied, cfg)
    with pytest.raises(ValueError, match="optim.emb_lr_mult must be > 0"):
        OptimConfig(emb_lr_mult=0)


def test_a_tied_head_with_two_multipliers_is_refused_before_torch_loads(compose_cfg) -> None:
    from runs.errors import ConfigError
    from training.run_config import typed_config

    with pytest.raises(ConfigError, match="set model.tie_weights=false"):
        typed_config(compose_cfg(["optim.emb_lr_mult=10"]))
    run = typed_config(compose_cfg(["optim.emb_lr_mult=10", "model.tie_weights=false"]))
    assert run.optim.lr_mults == {"emb": 10.0, "readout": 1.0, "hidden": 1.0}
