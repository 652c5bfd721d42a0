"""How a sub-layer's branch meets the residual stream, as a registry (``model.connection``).

"residual" is the plain sum y = branch + alpha * x of every placement (layers.ScaledResidual,
or Admin's OmegaResidual). The others widen the stream into n copies, H (n x C per token), and
learn how each sub-layer reads and writes them:

- "hc", dynamic hyper-connections (Zhu et al. 2025, "Hyper-Connections", ICLR; DHC), and "shc",
  their static form (SHC). Per token, with H_bar = RMSNorm(H) row by row:

      A_m = s_a tanh(H_bar W_m) + A_m0      (n x 1: how the streams mix into the branch input)
      A_r = s_a tanh(H_bar W_r) + A_r0      (n x n: how the streams mix among themselves)
      B   = s_b tanh(H_bar W_b) + B0        (n: how much of the branch each stream takes)
      h = A_m^T H;   H' = A_r^T H;   H_out = B^T F(h) + H'

  W zero and s_a = s_b = 0.01 at init; A_m0 one-hot at stream (sub-layer index mod n), A_r0 = I,
  B0 = 1, so at init every stream carries the plain sum's stream (Pre-LN's, for placement=pre).
  SHC drops the tanh terms.
- fracs m > 1, frac-connections (Zhu et al. 2025b, arXiv 2503.14125): the width split into m
  fractions of C / m, each a stream of its own; n streams of m fractions mix as n m rows, and
  fraction f of the branch output goes back to fraction g with weight B[f, s, g]. At init every
  fraction reads itself and gets its own fraction of the branch back (B0 = I over fractions),
  so the block computes the plain sum. The hyper-connections package (0.4.11) computes the same
  formula, but its B0 is one weight per (s, g) for every f, and its A_m0 feeds fraction 0 to
  every fraction of the branch input: at init its branch reads x's first fraction twice and each
  fraction gets the sum of the branch's fractions.
- "mhc", manifold-constrained hyper-connections (Xie et al. 2025, DeepSeek, arXiv 2512.24880):
  no tanh, H_pre = sigmoid(.), H_post = 2 sigmoid(.), and H_res projected onto the doubly
  stochastic matrices by Sinkhorn-Knopp, ``sinkhorn_iters`` alternating row and column
  normalizations, in the log domain in float32 (the exp-domain form leaves a row at 0 once its
  logits lie ~100 below its column's largest: exp underflows in float32). The
  coefficients come from each stream's row, as the hyper-connections package computes them (the
  paper computes them from the flattened n C vector of all streams). One fraction only.
- "mhc_lite" (mHC-lite, 2026): mHC with H_res built exactly doubly stochastic, as a convex
  combination of the n! permutation matrices (Birkhoff-von Neumann), softmax weights from
  static logits (the identity's 1, the others' 0: normlab's choice) plus per-token logits read
  from the streams' mean row, with no Sinkhorn iterations; H_pre and H_post as mHC's.

Every stream starts as a copy of the embedding, and a doubly stochastic H_res maps equal streams
to equal streams: with mHC's equal H_post (B0 = 1 for every stream) nothing in the forward pass
tells the streams apart, the loss does not depend on H_res, and the streams stay copies (the
stream-spread probe reads 0; the hyper-connections package's mHC behaves the same).
``stream_noise`` (model.stream_noise) breaks the symmetry at init: N(0, stream_noise^2) added to
each stream's static B0 (H_post's logits under mHC), so the streams take the branch in different
amounts from the first step and can separate.

The RMSNorm inside is x / ||x|| * sqrt(C) * g (no eps), g learned from 1. Every coefficient is
a 1-D parameter (reshaped in forward) so optimizers treat it like a norm gain: no weight decay,
not one of Muon's matrices. Between Blocks the n streams ride folded into the batch, (B n, T,
C), stream-minor; ``expand`` and ``reduce`` (the sum over streams) bracket the stack.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn

from models.catalog import ConnectionSpec

SCALE_INIT = 0.01  # s_a, s_b (Zhu et al. 2025); the mHC scales alike


def sinkhorn(logits: torch.Tensor, iters: int) -> torch.Tensor:
    """exp(logits) made doubly stochastic over its last two dims: ``iters`` rounds of column
    (dim -2) then row (dim -1) normalization, in the log domain in float32 (or float64)."""
    log = logits.to(torch.promote_types(logits.dtype, torch.float32))
    for _ in range(iters):
        log = log - log.logsumexp(dim=-2, keepdim=True)
        log = log - log.logsumexp(dim=-1, keepdim=True)
    return log.exp()


class HyperConnection(nn.Module):
    """One sub-layer's hyper-connection over ``streams`` streams of ``fracs`` fractions each.

    Rows r = (fraction f, stream s), f major; the columns of the width coefficients are, per
    output fraction g, [branch input, stream 0 .. n-1]. ``split(x)`` gives the branch input and
    what ``forward(branch, state)`` needs to write the branch back.
    """

    def __init__(
        self,
        dim: int,
        streams: int,
        fracs: int,
        index: int,
        spec: ConnectionSpec,
        sinkhorn_iters: int = 20,
        stream_noise: float | None = None,
    ) -> None:
        super().__init__()
        n, m = streams, fracs
        self.n, self.m, self.k = n, m, dim // m
        self.spec, self.sinkhorn_iters = spec, sinkhorn_iters
        self.cols = 1 if spec.lite else 1 + n  # mHC-lite's H_res comes from its permutations
        width = torch.zeros(m, n, m, self.cols)  # (f, s, g, column)
        depth = torch.zeros(m, n, m)  # (f, s, g)
        for f in range(m):
            width[f, index % n, f, 0] = 1.0  # A_m0: fraction f of stream (index mod n)
            if not spec.lite:
                width[f, :, f, 1:] = torch.eye(n)  # A_r0 = I
            depth[f, :, f] = 1.0  # B0 = 1: fraction f of the branch back to fraction f
        if stream_noise:  # break the copy symmetry: each stream its own share of the branch
            depth += stream_noise * torch.randn(m, n, m)
        self.static_width = nn.Parameter(width.flatten())
        self.static_depth = nn.Parameter(depth.flatten())
        self.gain = nn.Parameter(torch.ones(self.k))
        if spec.lite:
            perms = [torch.eye(n)[list(p)] for p in itertools.permutations(range(n))]
            self.register_buffer("perms", torch.stack(perms), persistent=False)  # (n!, n, n)
            logits = torch.zeros(len(perms))
            logits[0] = 1.0  # the identity permutation comes first
            self.static_perm = nn.Parameter(logits)
            if spec.dynamic:
                self.dynamic_perm = nn.Parameter(torch.zeros(self.k * len(perms)))
        if spec.dynamic:
            self.dynamic_width = nn.Parameter(torch.zeros(self.k * m * self.cols))
            self.dynamic_depth = nn.Parameter(torch.zeros(self.k * m))
            # HC: one s_a for A_m and A_r; mHC: one for H_pre and one for H_res
            self.width_scale = nn.Parameter(torch.full((2 if spec.manifold else 1,), SCALE_INIT))
            self.depth_scale = nn.Parameter(torch.full((1,), SCALE_INIT))

    def coefficients(self, H: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Width (B, T, f, s, g, 1+n) and depth (B, T, f, s, g) coefficients, in float32 (float64
        for a float64 H)."""
        n, m, k, cols = self.n, self.m, self.k, self.cols
        dtype = torch.promote_types(H.dtype, torch.float32)
        width = self.static_width.to(dtype).view(m, n, m, cols)
        depth = self.static_depth.to(dtype).view(m, n, m)
        normed = None
        if self.spec.dynamic:
            normed = F.normalize(H.to(dtype), dim=-1) * k**0.5 * self.gain.to(dtype)
            act = (lambda t: t) if self.spec.manifold else torch.tanh
            w = act(normed @ self.dynamic_width.to(dtype).view(k, m * cols))
            scale = self.width_scale.to(dtype)
            if self.spec.manifold:  # s_pre on the branch column, s_res on the stream columns
                scale = torch.cat([scale[:1], scale[1:].expand(cols - 1)])
            width = width + w.unflatten(-1, (m, cols)) * scale
            d = act(normed @ self.dynamic_depth.to(dtype).view(k, m))  # (B, T, f, s, g)
            depth = depth + d * self.depth_scale.to(dtype)
        else:
            width = width.expand(*H.shape[:2], -1, -1, -1, -1)
            depth = depth.expand(*H.shape[:2], -1, -1, -1)
        if self.spec.manifold:  # fracs == 1: (B, T, 1, s, 1, 1+n)
            pre = torch.sigmoid(width[..., :1])
            if self.spec.lite:
                res = self.lite_res(normed, H.shape[:2], dtype).unsqueeze(-2)
            else:
                res = sinkhorn(width[..., 0, 1:], self.sinkhorn_iters)  # (s, s') per token
                res = res.unsqueeze(-2)
            width = torch.cat([pre, res], dim=-1)
            depth = 2 * torch.sigmoid(depth)
        return width, depth

    def lite_res(self, normed: torch.Tensor | None, lead: tuple, dtype) -> torch.Tensor:
        """mHC-lite's H_res per token, (B, T, 1, s, s'): the permutations weighted by a softmax
        of the static logits plus the streams' mean row's dynamic ones."""
        logits = self.static_perm.to(dtype).expand(*lead, 1, -1)  # (B, T, f=1, n!)
        if normed is not None:
            w = normed.mean(dim=-2) @ self.dynamic_perm.to(dtype).view(self.k, -1)
            logits = logits + w * self.width_scale.to(dtype)[1:]
        return torch.einsum("btfp,pij->btfij", logits.softmax(-1), self.perms.to(dtype))

    def streams_of(self, x: torch.Tensor) -> torch.Tensor:
        """(B n, T, C) -> (B, T, f, s, k)."""
        Bn, T, C = x.shape
        H = x.view(Bn // self.n, self.n, T, self.m, self.k)
        return H.permute(0, 2, 3, 1, 4)

    def folded(self, H: torch.Tensor) -> torch.Tensor:
        """(B, T, f, s, k) -> (B n, T, C)."""
        B, T = H.shape[:2]
        return H.permute(0, 3, 1, 2, 4).reshape(B * self.n, T, self.m * self.k)

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        H = self.streams_of(x)
        width, depth = self.coefficients(H)
        mix = torch.einsum("btfsgc,btfsk->btgck", width, H.to(width.dtype))  # (B, T, g, 1+n, k)
        branch_in = mix[..., 0, :].flatten(-2).to(x.dtype)  # (B, T, C)
        return branch_in, (mix[..., 1:, :].to(x.dtype), depth)  # H' (B, T, g, s, k)

    def forward(self, branch: torch.Tensor, state: tuple[torch.Tensor, ...]) -> torch.Tensor:
        rest, depth = state  # H' (B, T, g, s, k), B (B, T, f, s, g)
        out = branch.to(depth.dtype).unflatten(-1, (self.m, self.k))  # (B, T, f, k)
        written = torch.einsum("btfk,btfsg->btgsk", out, depth)  # B^T F(h): (B, T, g, s, k)
        return self.folded(rest + written.to(rest.dtype))

    def extra_repr(self) -> str:
        return f"{self.spec.name}, streams={self.n}, fracs={self.m}"


def expand(x: torch.Tensor, streams: int) -> torch.Tensor:
    """(B, T, C) -> (B n, T, C): every stream starts as x."""
    return x if streams == 1 else x.repeat_interleave(streams, dim=0)


def reduce(x: torch.Tensor, streams: int) -> torch.Tensor:
    """(B n, T, C) -> (B, T, C): the streams' sum."""
    return x if streams == 1 else x.unflatten(0, (-1, streams)).sum(1)
