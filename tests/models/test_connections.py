"""Hyper-connections (Zhu et al. 2025), frac-connections (Zhu et al. 2025b) and mHC (Xie et al.
2025) against the `hyper-connections` package at identical weights, against Pre-LN at init, and
in float32 and bfloat16 against float64."""

from __future__ import annotations

import pytest
import torch
from hyper_connections import HyperConnections, mHC
from hyper_connections.manifold_constrained_hyper_connections import sinkhorn_knopps

from models.catalog import CONNECTIONS
from models.connections import HyperConnection, sinkhorn
from models.gpt import GPT
from models.vit import ViT
from tests.models.model_helpers import gpt_config, vit_config


def perturbed(name: str, streams: int, fracs: int, dim: int = 16, index: int = 1):
    """A connection whose every parameter is moved off its init, so each one counts."""
    torch.manual_seed(0)
    ours = HyperConnection(dim, streams, fracs, index, CONNECTIONS[name])
    with torch.no_grad():
        for p in ours.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return ours


def package_copy(ours: HyperConnection, log_domain: bool = True) -> torch.nn.Module:
    """The package's module for the same connection, holding ours' weights in its layout."""
    n, m, k = ours.n, ours.m, ours.k
    # the package's B0 has one weight per (stream, fraction g) for every branch fraction f
    with torch.no_grad():
        ours.static_depth.view(m, n, m)[1:] = ours.static_depth.view(m, n, m)[0]
    state = {
        "static_alpha": ours.static_width.view(m * n, m * (1 + n)),
        "static_beta": ours.static_depth.view(m, n, m)[0].flatten(),
        "norm.gamma": ours.gain - 1,  # the package's RMSNorm scales by gamma + 1
    }
    depth_fn = ours.dynamic_depth.view(k) if m == 1 else ours.dynamic_depth.view(k, m)
    if ours.spec.manifold:
        pkg = mHC(n, dim=k * m, layer_index=1, sinkhorn_iters=20, log_domain_sinkhorn=log_domain)
        state |= {
            "dynamic_alpha_fn": ours.dynamic_width.view(1, k, 1 + n),
            "pre_branch_scale": ours.width_scale[:1],
            "residual_scale": ours.width_scale[1:],
            "dynamic_beta_fn": depth_fn,
            "h_post_scale": ours.depth_scale[0],
        }
    else:
        pkg = HyperConnections(n, dim=k * m, layer_index=1, num_fracs=m)
        state |= {
            "dynamic_alpha_fn": ours.dynamic_width.view(k, m * (1 + n)),
            "dynamic_alpha_scale": ours.width_scale[0],
            "dynamic_beta_fn": depth_fn,
            "dynamic_beta_scale": ours.depth_scale[0],
        }
    pkg.load_state_dict({key: v.detach().clone() for key, v in state.items()}, strict=True)
    return pkg


@pytest.mark.parametrize(
    "name, streams, fracs",
    [("hc", 4, 1), ("hc", 2, 1), ("hc", 1, 2), ("hc", 2, 2), ("hc", 3, 4), ("mhc", 4, 1)],
)
def test_the_package_computes_the_same_connection(name: str, streams: int, fracs: int) -> None:
    ours = perturbed(name, streams, fracs)
    pkg = package_copy(ours)
    x, branch = torch.randn(3 * streams, 5, 16), torch.randn(3, 5, 16)
    ours_in, state = ours.split(x)
    pkg_in, add_branch = pkg(x)
    torch.testing.assert_close(ours_in, pkg_in, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours(branch, state), add_branch(branch), rtol=1e-5, atol=1e-6)


def test_mhc_equals_the_packages_exp_domain_sinkhorn_where_nothing_underflows() -> None:
    ours = perturbed("mhc", 4, 1)
    pkg = package_copy(ours, log_domain=False)
    x, branch = torch.randn(12, 5, 16), torch.randn(3, 5, 16)
    ours_in, state = ours.split(x)
    pkg_in, add_branch = pkg(x)
    torch.testing.assert_close(ours_in, pkg_in)
    torch.testing.assert_close(ours(branch, state), add_branch(branch), rtol=1e-4, atol=1e-5)


def test_sinkhorn_is_doubly_stochastic_and_survives_logits_that_underflow_exp() -> None:
    torch.manual_seed(0)
    logits = 3 * torch.randn(6, 4, 4)
    ours = sinkhorn(logits, 20)
    torch.testing.assert_close(ours, sinkhorn_knopps(logits, 20))
    torch.testing.assert_close(ours.sum(-1), torch.ones(6, 4))  # rows last: exact
    converged = sinkhorn(logits, 500)
    torch.testing.assert_close(converged.sum(-2), torch.ones(6, 4), rtol=0, atol=1e-4)
    # one row 200 below the other: Sinkhorn does not see a row's scale, so the answer is 1/2
    # everywhere; in the exp domain exp(-200) is 0 in float32 and that row stays 0
    wide = torch.tensor([[0.0, 0.0], [-200.0, -200.0]])
    assert sinkhorn_knopps(wide, 20)[1].sum() == 0
    torch.testing.assert_close(sinkhorn(wide, 20), torch.full((2, 2), 0.5))


@pytest.mark.parametrize("streams, fracs", [(1, 2), (4, 1), (4, 2)])
def test_at_init_every_stream_reads_and_keeps_x(streams: int, fracs: int) -> None:
    """A_m0 one-hot, A_r0 = I, B0 = 1 (I over fractions): the branch reads x, and each stream
    gets x + F(x); the package's fractions read fraction 0 twice at init (its 0.4.11)."""
    conn = HyperConnection(8, streams, fracs, index=3, spec=CONNECTIONS["hc"])
    x, branch = torch.randn(2, 3, 8), torch.randn(2, 3, 8)
    h, state = conn.split(x.repeat_interleave(streams, dim=0))
    torch.testing.assert_close(h, x)
    out = conn(branch, state)
    torch.testing.assert_close(out, (x + branch).repeat_interleave(streams, dim=0))
    pkg_in, _ = HyperConnections(1, dim=8, layer_index=0, num_fracs=2)(x)
    torch.testing.assert_close(pkg_in[..., 4:], x[..., :4])  # the package's init, as said


@pytest.mark.parametrize("connection, streams, fracs", [("hc", 4, 1), ("shc", 2, 1), ("hc", 1, 4)])
def test_a_hyper_connected_gpt_at_init_is_pre_ln(connection: str, streams: int, fracs: int) -> None:
    """n identical streams summed and normed equal the Pre-LN stream normed (eps ~0)."""
    torch.manual_seed(0)
    kw = {"norm": {"name": "layernorm", "eps": 1e-12}, "n_layer": 3}
    plain = GPT(gpt_config(**kw))
    hyper = GPT(gpt_config(connection=connection, streams=streams, fracs=fracs, **kw))
    missing = hyper.load_state_dict(plain.state_dict(), strict=False).missing_keys
    assert missing and all("_residual." in key for key in missing)
    idx = torch.randint(0, 23, (2, 8))
    torch.testing.assert_close(hyper(idx)[0], plain(idx)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name, streams, fracs", [("hc", 4, 1), ("hc", 2, 2), ("mhc", 4, 1)])
def test_float32_and_bfloat16_against_float64(name: str, streams: int, fracs: int) -> None:
    ours = perturbed(name, streams, fracs)
    x, branch = torch.randn(3 * streams, 5, 16), torch.randn(3, 5, 16)
    h64, s64 = ours.double().split(x.double())
    y64 = ours(branch.double(), s64)
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 3e-2)):
        h, state = ours.to(dtype).split(x.to(dtype))
        y = ours(branch.to(dtype), state)
        assert h.dtype == y.dtype == dtype
        torch.testing.assert_close(h.double(), h64, rtol=tol, atol=tol)
        torch.testing.assert_close(y.double(), y64, rtol=tol, atol=tol)


def test_connections_train_in_the_gpt_and_the_vit_and_refuse_what_they_cannot_be() -> None:
    torch.manual_seed(0)
    gpt = GPT(gpt_config(connection="mhc", streams=3, placement="sandwich"))
    idx = torch.randint(0, 23, (2, 8))
    _, loss = gpt(idx, idx)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(b.attn_residual.dynamic_width.grad.abs().sum() > 0 for b in gpt.blocks)
    vit = ViT(vit_config(connection="hc", streams=2, fracs=2))
    _, loss = vit(torch.randn(2, 1, 4, 4), torch.tensor([1, 2]))
    assert torch.isfinite(loss)
    # coefficients are 1-D: no weight decay, not one of Muon's matrices
    assert all(p.ndim == 1 for b in gpt.blocks for p in b.attn_residual.parameters())
    refusals = [
        ({"streams": 4}, r"model\.connection=hc"),
        ({"connection": "hc", "streams": 2, "placement": "post"}, r"placement=pre, sandwich"),
        ({"connection": "mhc", "streams": 2, "fracs": 2}, r"model\.fracs=1"),
        ({"connection": "hc", "fracs": 3}, r"does not divide"),
        ({"connection": "hc", "streams": 2, "param": "mup"}, r"use param=sp"),
        ({"connection": "hyper"}, r"choose model\.connection from"),
    ]
    for kw, message in refusals:
        with pytest.raises(ValueError, match=message):
            gpt_config(**kw)


@pytest.mark.parametrize(
    "model, connection", [("gpt", ["model.connection=mhc", "model.streams=2"]),
                          ("vit", ["model.connection=hc", "model.fracs=2"])],
)  # fmt: skip
def test_connections_train_finite_from_the_command_line(
    tmp_path, tiny_run, compose_cfg, one_thread, model: str, connection: list[str]
) -> None:
    import json
    import math

    import train

    if model == "vit":  # the digits data: no context length, no val batch count
        tiny_run = [o for o in tiny_run if not o.startswith(("model.block_size", "data.val_b"))]
    over = [*tiny_run, *(["model=vit"] if model == "vit" else []), *connection]
    summary = train.run(compose_cfg([*over, f"run_dir={tmp_path}"]))
    assert summary["status"] == "completed" and math.isfinite(summary["final_val_loss"])
    recorded = json.loads((tmp_path / "summary.json").read_text())["run_config"]
    assert recorded["model.connection"] == connection[0].split("=")[1]
