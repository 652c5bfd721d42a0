"""Admin's profiling (Liu et al. 2020) against the sums written out by hand."""

from __future__ import annotations

import math

import pytest
import torch
from model_helpers import batch, build, gpt_config, vit_config

from models.gpt import GPT
from models.layers import OmegaResidual
from models.vit import ViT


def population_var(t: torch.Tensor) -> float:
    t = t.double()
    return ((t - t.mean()) ** 2).mean().item()


def expected_omegas(model, inputs: torch.Tensor) -> list[float]:
    """omega_i = sqrt(1 + sum_{j<i} Var[F_j] / Var[x_{j-1}]): the forward of every Post-LN
    sub-layer composed by hand with omega = 1, from the model's own embedding and sub-layers."""
    with torch.no_grad():
        if isinstance(model, GPT):
            x = model.tok_emb(inputs) + model.pos_emb(torch.arange(inputs.shape[1]))
        else:
            x = model.patch_embed(model.patchify(inputs))
            if model.cls_token is not None:
                x = torch.cat([model.cls_token.expand(len(inputs), -1, -1), x], dim=1)
            x = x + model.pos_emb
        total, omegas = 1.0, []
        for block in model.blocks:
            for sub, post in ((block.attn, block.attn_post), (block.mlp, block.mlp_post)):
                branch = sub(x)
                omegas.append(math.sqrt(total))
                total += population_var(branch) / population_var(x)
                x = post(x + branch)
    return omegas


@pytest.mark.parametrize("model_name", ["gpt", "vit"])
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_profile_init_sets_each_omega_from_the_variances_before_it(model_name, norm):
    torch.manual_seed(0)
    model = build(model_name, placement="admin", norm=norm, n_layer=3)
    inputs = batch(model_name, n=4)[0]
    expected = expected_omegas(model, inputs)  # the omegas are still 1 here
    with torch.no_grad():  # a profile must not depend on what omega held before it
        for m in model.modules():
            if isinstance(m, OmegaResidual):
                m.omega.fill_(7.0)
    before = {k: v.clone() for k, v in model.state_dict().items() if "omega" not in k}
    model.profile_init(inputs)
    skips = [m for m in model.modules() if isinstance(m, OmegaResidual)]
    assert len(skips) == 2 * 3 == len(expected)
    for skip, value in zip(skips, expected, strict=True):
        torch.testing.assert_close(skip.omega, torch.full((16,), value), rtol=1e-5, atol=0)
    assert expected[0] == 1.0 < expected[1] < expected[-1]  # the sums only grow
    after = {k: v for k, v in model.state_dict().items() if "omega" not in k}
    assert all(torch.equal(before[k], after[k]) for k in before)  # only the omegas change
    assert model.training  # the profile runs in eval mode and gives training mode back


@pytest.mark.parametrize("scale", [1.0, 50.0])
def test_no_skip_starts_below_plain_post_ln(scale):
    """Variances relative to each sub-layer's input: with the GPT's small embeddings (std 0.02)
    as with unit-scale ones, omega_1 = 1 and every later omega > 1."""
    torch.manual_seed(0)
    model = build("gpt", placement="admin", n_layer=3)
    with torch.no_grad():
        model.tok_emb.weight.mul_(scale)
        model.pos_emb.weight.mul_(scale)
    model.profile_init(batch("gpt", n=4)[0])
    omegas = [m.omega[0].item() for m in model.modules() if isinstance(m, OmegaResidual)]
    assert omegas[0] == 1.0 and all(w > 1.0 for w in omegas[1:])
    assert omegas == sorted(omegas)


def test_omegas_are_parameters_in_the_state_dict_and_learn():
    torch.manual_seed(0)
    model = GPT(gpt_config(placement="admin"))
    idx = batch("gpt")[0]
    model.profile_init(idx)
    state = model.state_dict()
    assert [k for k in state if "omega" in k] == [
        f"blocks.{i}.{s}_residual.omega" for i in range(2) for s in ("attn", "mlp")
    ]
    fresh = GPT(gpt_config(placement="admin"))
    fresh.load_state_dict(state)  # a checkpoint carries them: no second profile needed
    torch.testing.assert_close(fresh(idx)[0], model(idx)[0])
    model(idx, idx)[1].backward()
    assert all(m.omega.grad.abs().sum() > 0 for m in model.modules() if hasattr(m, "omega"))


@pytest.mark.parametrize("placement", ["post", "pre", "deepnorm", "ngpt"])
def test_profile_init_is_a_no_op_without_omegas(placement):
    torch.manual_seed(0)
    model = ViT(vit_config(placement=placement))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.profile_init(batch("vit")[0])
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
