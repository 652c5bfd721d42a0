"""mHC's streams start as copies and a doubly stochastic H_res keeps them copies: the loss does
not depend on H_res, so it gets no gradient. model.stream_noise breaks the symmetry at init;
mHC-lite builds H_res exactly doubly stochastic from permutations; the stream-spread instrument
measures how far the streams are from copies."""

from __future__ import annotations

import itertools

import pytest
import torch

from models.catalog import CONNECTIONS
from models.connections import HyperConnection
from models.gpt import GPT
from tests.models.model_helpers import gpt_config
from training.probes.instruments import StreamSpread, stream_spread


def res_grad_and_spread(connection: str, noise: float | None) -> tuple[float, float]:
    """(largest |gradient| of H_res's static logits, the streams' spread after the last block)
    for one forward and backward of a 2-layer GPT with 4 streams at init."""
    torch.manual_seed(0)
    model = GPT(gpt_config(connection=connection, streams=4, stream_noise=noise, n_layer=2))
    outs: list[torch.Tensor] = []
    model.blocks[-1].register_forward_hook(lambda m, i, o: outs.append(o))
    idx = torch.randint(0, 23, (4, 8))
    model(idx, idx.roll(-1, 1))[1].backward()
    res = [b.attn_residual.static_width.grad.view(1, 4, 1, 5)[..., 1:] for b in model.blocks]
    return max(float(g.abs().max()) for g in res), float(stream_spread(outs[0], 4))


def test_mhcs_copied_streams_give_h_res_no_gradient_and_noise_breaks_that() -> None:
    grad, spread = res_grad_and_spread("mhc", None)
    # the streams are copies; H_res is invisible (what is left is float rounding: ~1e-10)
    assert spread < 1e-6 and grad < 1e-8
    grad, spread = res_grad_and_spread("mhc", 0.3)
    assert spread > 1e-2 and grad > 1e-6  # each stream takes its own share of the branch


def test_mhc_lite_mixes_permutations_exactly_doubly_stochastic() -> None:
    torch.manual_seed(0)
    conn = HyperConnection(8, 4, 1, 1, CONNECTIONS["mhc_lite"])
    assert conn.perms.shape == (24, 4, 4)
    with torch.no_grad():
        for p in conn.parameters():
            p.add_(0.5 * torch.randn_like(p))
    H = torch.randn(2, 3, 1, 4, 8)
    res_and_pre = conn.coefficients(H)[0]
    res = res_and_pre[:, :, 0, :, 0, 1:]  # (B, T, s, s')
    ones = torch.ones(2, 3, 4)
    torch.testing.assert_close(res.sum(-1), ones, rtol=0, atol=1e-6)
    torch.testing.assert_close(res.sum(-2), ones, rtol=0, atol=1e-6)
    assert (res >= 0).all()
    # a dominant static logit on one permutation: H_res is that permutation
    with torch.no_grad():
        conn.static_perm.zero_()
        conn.static_perm[7] = 60.0
        conn.dynamic_perm.zero_()
    res = conn.coefficients(H)[0][:, :, 0, :, 0, 1:]
    perm = torch.eye(4)[list(list(itertools.permutations(range(4)))[7])]
    torch.testing.assert_close(res, perm.expand_as(res), rtol=0, atol=1e-6)


def test_stream_spread_by_hand_and_off_with_one_stream() -> None:
    # two streams [2, 0] and [0, 0]: mean [1, 0], deviations +-[1, 0]: sqrt(2) / (1 x sqrt(2))
    h = torch.tensor([[[2.0, 0.0]], [[0.0, 0.0]]])  # (B n = 2, T = 1, C = 2)
    assert float(stream_spread(h, 2)) == pytest.approx(1.0)
    assert float(stream_spread(torch.ones(4, 3, 2), 2)) == 0.0
    one = GPT(gpt_config(n_layer=1))
    measure = StreamSpread()
    assert measure.attach(one) == [] and measure.read(None, 0) == {}


def test_stream_noise_and_mhc_lite_refuse_what_they_cannot_be() -> None:
    with pytest.raises(ValueError, match="needs several streams"):
        gpt_config(stream_noise=0.3)
    with pytest.raises(ValueError, match="model.streams 2-5"):
        gpt_config(connection="mhc_lite", streams=6)
    with pytest.raises(ValueError, match="model.stream_noise must be >= 0"):
        gpt_config(connection="mhc", streams=2, stream_noise=-1.0)
