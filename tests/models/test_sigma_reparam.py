"""sigmaReparam (Zhai et al. 2023, Eq. 2: w_hat = gamma w / sigma(w)) against its formula, the
authors' power iteration (apple/ml-sigma-reparam: SVD at init, one step per training forward)
and torch's spectral norm; the gradient probe's dL/dW against autograd's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from model_helpers import gpt_config

from models.config import ParamConfig
from models.gpt import GPT
from models.init import SigmaReparam, block_linears
from training.probes.gradients import weight_grad


def sigma_gpt(**kw) -> GPT:
    torch.manual_seed(0)
    return GPT(gpt_config(sigma_reparam=True, **kw))


def test_at_init_the_effective_weight_is_the_initialized_one():
    torch.manual_seed(0)
    plain = GPT(gpt_config())
    reparam = sigma_gpt()
    for a, b in zip(plain.blocks, reparam.blocks, strict=True):
        for lin_a, lin_b in zip(block_linears(a), block_linears(b), strict=True):
            torch.testing.assert_close(lin_b.weight, lin_a.weight, rtol=1e-5, atol=1e-6)
            gamma = lin_b.parametrizations.weight[0].gamma
            assert gamma.item() == pytest.approx(torch.linalg.matrix_norm(lin_a.weight, 2).item())


def test_one_training_forward_is_one_power_iteration_step_by_hand():
    torch.manual_seed(1)
    w = torch.randn(12, 8, dtype=torch.float64)
    reparam = SigmaReparam(w).double()
    w2 = torch.randn(12, 8, dtype=torch.float64)  # the weight after some steps
    with torch.no_grad():
        reparam.gamma.fill_(0.7)
    u0 = reparam.u.clone()
    v = w2 @ u0 / (w2 @ u0).norm()
    u1 = w2.T @ v / (w2.T @ v).norm()
    expected = 0.7 * w2 / (v @ w2 @ u1)
    torch.testing.assert_close(reparam(w2), expected)
    torch.testing.assert_close(reparam.u, u1)  # the buffer moved one step
    reparam.eval()
    reparam(w2 + 1)
    torch.testing.assert_close(reparam.u, u1)  # evaluation leaves it
    reparam.train()
    with torch.no_grad():  # a probe's read leaves it too
        reparam(w2 + 1)
    torch.testing.assert_close(reparam.u, u1)
    for _ in range(200):  # the iteration converges to the top singular value
        out = reparam(w2)
    assert torch.linalg.matrix_norm(out, 2).item() == pytest.approx(0.7, rel=1e-8)


def test_the_gradient_probe_reads_dl_dw_of_the_effective_weight():
    model = sigma_gpt()
    model.train()
    linear = model.blocks[0].attn.q_proj
    x = torch.randn(5, linear.in_features)
    effective = linear.weight  # this access is the training forward's power step
    effective.retain_grad()
    (F.linear(x, effective, linear.bias) ** 2).sum().backward()
    torch.testing.assert_close(weight_grad(linear), effective.grad, rtol=1e-4, atol=1e-6)


def test_a_gpt_trains_finite_and_the_refusals_are_one_line():
    model = sigma_gpt()
    idx = torch.randint(0, model.cfg.vocab_size, (2, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(3):
        _, loss = model(idx, idx)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert torch.isfinite(loss)
    with pytest.raises(ValueError, match="model.weight_norm: set one of them false"):
        gpt_config(sigma_reparam=True, weight_norm=True)
    with pytest.raises(ValueError, match="use param=sp"):
        gpt_config(sigma_reparam=True, param=ParamConfig(name="mup", base_width=16))
