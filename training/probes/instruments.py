"""The instruments of recent stability papers, as forward measures on the probe batch (off unless
named in ``probes.enabled``; like every probe they leave training bit-identical):

attn/sink/layer_{i}          share of layer i's heads whose attention on the first token,
                             alpha_h = mean over query rows of p_{r,0}, exceeds 0.3, each
                             sample of the batch thresholded on its own, then averaged
attn/sink                    the same share over every layer's heads: Gu et al. 2025's Sink_1
                             with their threshold epsilon = 0.3 ("When Attention Sink Emerges"),
                             per sample and averaged over the samples, as they compute it
attn/first_token/layer_{i}   mean over samples and heads of alpha_h
act_massive/layer_{i}        max |h| / median |h| over (batch, position, channel) of the block's
                             output h: massive activations sit ~1e3-1e4 x above the median (Sun
                             et al. 2024, "Massive Activations in LLMs")
act_massive/channel|token/layer_{i}   the channel and the position that max sits on
act_massive/abs/layer_{i}    max |h| itself
act_massive/count/layer_{i}  how many activations are massive as Sun et al. define them: |h| >
                             100 and |h| > 1000 x median |h| (both; the ratio alone is not it)
act_kurtosis/layer_{i}       Kurt = mean_j(s_j^4) / mean_j(s_j^2)^2 of the neurons' RMS
                             s_j = sqrt(mean_n h_nj^2) over the n = batch x positions rows of
                             h (He et al. 2024, "Understanding and Minimising Outlier Features"):
                             1 when every channel has the same RMS, large with outlier channels
linear_out/{q,k,v,proj,fc1,fc2}/layer_{i}   RMS of each linear layer's output (Rybakov et al.
                             2024 saw those of QKV, the projection and FC2 grow before divergence)
headroom/absmax              the largest |value| of any activation the pass produces: each
                             block's output and every module output inside it, the q, k, v and
                             attention logits, and the output logits
headroom/fp16, /bf16         log2(the format's largest finite value / absmax): how many doublings
                             the activations may still grow before they overflow that format
saturation/norm/layer_{i}    share of the elements of block i's DyT / Derf norms in saturation,
                             |tanh(a x)| or |erf(a x + s)| >= 0.99 (slope <= 2% of the centre's)
saturation/final_norm        the same for the model's final norm
saturation/ax2/layer_{i}     share of block i's DyT / Derf elements with |a x (+ s)| > 2, the
                             measure Verma 2026 reports (tanh(2) = 0.964)
streams/spread/layer_{i}     a multi-stream run's (model.streams > 1) spread of its residual
                             streams after block i: ||H_s - mean_s H|| / ||mean_s H|| over the
                             batch, positions and channels. 0 while every stream is a copy of
                             the others (mHC's init: its streams cannot separate by themselves)
saturation/attn_cap/layer_{i}   share of attention logits (over the pairs the softmax sees) with
                             |tanh(s / c)| >= 0.99 under a soft-cap c
saturation/logit_cap         share of output logits with |tanh(z / c)| >= 0.99
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.attention_scores import attention_scores
from models.norms import Derf, DyT
from runs import metric_names as names
from training.probes.forward import ForwardMeasure

SINK_THRESHOLD = 0.3  # Gu et al. 2025's epsilon
MASSIVE_ABS, MASSIVE_RATIO = 100.0, 1000.0  # Sun et al. 2024's two conditions
SATURATED = 0.99  # |tanh| or |erf| at or above this: the unit passes 2% of its central slope
VERMA_AX = 2.0  # Verma 2026's saturation: |a x| > 2
FORMATS = {names.HEADROOM_FP16: torch.float16, names.HEADROOM_BF16: torch.bfloat16}


def first_token_attention(attn: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """alpha_h per sample and head, (B, nh): the mean over query rows of the attention weight
    the row puts on the first token (every row sees it, causal or not)."""
    p = attention_scores(attn, x, capped=True).softmax(dim=-1)  # (B, nh, T, T)
    return p[..., 0].mean(dim=2)


def massive(h: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(max |h| / median |h|, its channel, its position, max |h|, how many |h| are massive) for
    h of shape (B, T, C) or (B, C)."""
    a = h.detach().float().abs()
    a = a if a.dim() == 3 else a.unsqueeze(1)
    top = a.flatten().argmax()
    T, C = a.shape[1], a.shape[2]
    median = a.median().clamp_min(torch.finfo(torch.float32).tiny)
    peak = a.flatten()[top]
    count = ((a > MASSIVE_ABS) & (a > MASSIVE_RATIO * median)).sum()
    return peak / median, top % C, (top // C) % T, peak, count


def neuron_kurtosis(h: torch.Tensor) -> torch.Tensor:
    """He et al.'s Kurt(h): the neurons' RMS s_j over every row, then mean(s^4) / mean(s^2)^2."""
    s2 = h.detach().float().reshape(-1, h.shape[-1]).square().mean(dim=0)  # s_j^2, (C,)
    return s2.square().mean() / s2.mean().square().clamp_min(torch.finfo(torch.float32).tiny)


def rms(t: torch.Tensor) -> torch.Tensor:
    return t.detach().float().square().mean().sqrt()


class PerLayer(ForwardMeasure):
    """A measure that fills ``self.values`` (metric name -> 0-d tensor) from hooks per layer."""

    def attach(self, model):
        self.values: dict[str, torch.Tensor] = {}
        return [h for i, block in enumerate(model.blocks) for h in self.hooks(i, block)]

    def hooks(self, i: int, block: nn.Module) -> list:
        raise NotImplementedError

    def read(self, logits, step):
        return dict(self.values)


class AttnSink(PerLayer):
    """Attention sinks: per layer the share of (sample, head) pairs whose head puts > 0.3 of its
    weight on token 0 in that sample."""

    def attach(self, model):
        self.heads: dict[int, torch.Tensor] = {}
        return super().attach(model)

    def hooks(self, i, block):
        def fn(module, args):
            alpha = first_token_attention(module, args[0])
            self.heads[i] = alpha
            self.values[names.per_layer(names.ATTN_SINK, i)] = (
                (alpha > SINK_THRESHOLD).float().mean()
            )
            self.values[names.per_layer(names.ATTN_FIRST, i)] = alpha.mean()

        return [block.attn.register_forward_pre_hook(fn)]

    def read(self, logits, step):
        every_head = torch.cat([alpha.flatten() for alpha in self.heads.values()])
        return {**self.values, names.ATTN_SINK: (every_head > SINK_THRESHOLD).float().mean()}


class MassiveActivations(PerLayer):
    """The largest |h| of each block's output over its median, with where it sits."""

    def hooks(self, i, block):
        def fn(module, inputs, output):
            ratio, channel, token, peak, count = massive(output)
            self.values[names.per_layer(names.ACT_MASSIVE, i)] = ratio
            self.values[names.per_layer(names.ACT_MASSIVE_CHANNEL, i)] = channel
            self.values[names.per_layer(names.ACT_MASSIVE_TOKEN, i)] = token
            self.values[names.per_layer(names.ACT_MASSIVE_ABS, i)] = peak
            self.values[names.per_layer(names.ACT_MASSIVE_COUNT, i)] = count

        return [block.register_forward_hook(fn)]


class OutlierKurtosis(PerLayer):
    """Kurtosis of the neurons' RMS in each block's output (outlier features)."""

    def hooks(self, i, block):
        def fn(module, inputs, output):
            self.values[names.per_layer(names.ACT_KURTOSIS, i)] = neuron_kurtosis(output)

        return [block.register_forward_hook(fn)]


class LinearOutputs(PerLayer):
    """RMS of the outputs of each block's q, k, v and output projections and of fc1 and fc2."""

    def hooks(self, i, block):
        def record(name: str, out: torch.Tensor) -> None:
            self.values[names.per_layer(f"{names.LINEAR_OUT}/{name}", i)] = rms(out)

        def qkv(module, args):  # the attention runs q, k and v as one stacked matmul
            for name in ("q", "k", "v"):
                linear = getattr(module, f"{name}_proj")
                record(name, F.linear(args[0], linear.weight, linear.bias))

        def output_of(name: str):
            return lambda module, inputs, out: record(name, out)

        pairs = [(block.attn.out_proj, "proj"), (block.mlp.fc1, "fc1"), (block.mlp.fc2, "fc2")]
        return [block.attn.register_forward_pre_hook(qkv)] + [
            module.register_forward_hook(output_of(name)) for module, name in pairs
        ]


def stream_spread(h: torch.Tensor, streams: int) -> torch.Tensor:
    """||H_s - mean_s H|| / ||mean_s H|| for h = (B n, T, C), the n streams stream-minor."""
    H = h.detach().float().unflatten(0, (-1, streams))  # (B, n, T, C)
    mean = H.mean(dim=1, keepdim=True)
    return (H - mean).norm() / (mean.norm() * streams**0.5).clamp_min(1e-30)


class StreamSpread(PerLayer):
    """How far a multi-stream model's residual streams are from copies of each other."""

    def attach(self, model):
        self.streams = getattr(getattr(model, "cfg", None), "streams", 1)
        return super().attach(model) if self.streams > 1 else []

    def hooks(self, i, block):
        def fn(module, inputs, output):
            spread = stream_spread(output, self.streams)
            self.values[names.per_layer(names.STREAM_SPREAD, i)] = spread

        return [block.register_forward_hook(fn)]

    def read(self, logits, step):
        return dict(self.values) if self.streams > 1 else {}


class Headroom(ForwardMeasure):
    """The largest |activation| of the pass against the fp16 and bf16 ranges."""

    def attach(self, model):
        self.peaks: list[torch.Tensor] = []

        def output(module, inputs, out):
            if isinstance(out, torch.Tensor) and out.is_floating_point():
                self.peaks.append(out.detach().float().abs().amax())

        def attention(module, args):
            q, k, v = module.qkv(args[0])
            scores = attention_scores(module, args[0])
            seen = scores[torch.isfinite(scores)].abs()
            self.peaks += [t.detach().float().abs().amax() for t in (q, k, v)] + [seen.amax()]

        handles = [b.attn.register_forward_pre_hook(attention) for b in model.blocks]
        return handles + [m.register_forward_hook(output) for m in model.blocks.modules()]

    def read(self, logits, step):
        absmax = torch.stack([*self.peaks, logits.detach().abs().amax()]).amax()
        out = {names.HEADROOM_ABSMAX: absmax}
        for name, dtype in FORMATS.items():
            out[name] = torch.log2(torch.finfo(dtype).max / absmax)
        return out


def pre_activation(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """a x for DyT, a x + s for Derf: what the squashing function reads."""
    z = module.alpha * x.detach().float()
    return z if isinstance(module, DyT) else z + module.shift


def saturated_share(
    module: nn.Module, x: torch.Tensor, z: torch.Tensor | None = None
) -> tuple[torch.Tensor, int]:
    """(saturated elements, elements) of a DyT or Derf norm on its input x (``z``: its
    pre-activation, when already computed)."""
    z = pre_activation(module, x) if z is None else z
    squashed = torch.tanh(z) if isinstance(module, DyT) else torch.erf(z)
    return (squashed.abs() >= SATURATED).sum(), squashed.numel()


def verma_share(
    module: nn.Module, x: torch.Tensor, z: torch.Tensor | None = None
) -> tuple[torch.Tensor, int]:
    """(elements with |a x (+ s)| > 2, elements): Verma 2026's saturation."""
    z = pre_activation(module, x) if z is None else z
    return (z.abs() > VERMA_AX).sum(), z.numel()


class Saturation(ForwardMeasure):
    """The share of DyT / Derf elements and soft-capped logits in saturation."""

    def attach(self, model):
        self.counts: dict[str, list] = {}  # name -> [saturated count tensors, elements]
        self.cap = getattr(getattr(model, "cfg", None), "logit_softcap", None)

        def count(name: str, hit: torch.Tensor, total: int) -> None:
            entry = self.counts.setdefault(name, [[], 0])
            entry[0].append(hit)
            entry[1] += total

        def norm_hook(name: str, verma: str | None = None):
            def fn(module, args):
                z = pre_activation(module, args[0])
                count(name, *saturated_share(module, args[0], z))
                if verma is not None:
                    count(verma, *verma_share(module, args[0], z))

            return fn

        def capped_attention(name: str):
            def fn(module, args):
                s = attention_scores(module, args[0])
                seen = s[torch.isfinite(s)]
                count(
                    name, (torch.tanh(seen / module.softcap).abs() >= SATURATED).sum(), seen.numel()
                )

            return fn

        handles = []
        for i, block in enumerate(model.blocks):
            layer = names.per_layer(f"{names.SATURATION}/norm", i)
            verma = names.per_layer(f"{names.SATURATION}/ax2", i)
            handles += [
                m.register_forward_pre_hook(norm_hook(layer, verma))
                for m in block.modules()
                if isinstance(m, DyT | Derf)
            ]
            if getattr(block.attn, "softcap", None) is not None:
                cap = names.per_layer(f"{names.SATURATION}/attn_cap", i)
                handles.append(block.attn.register_forward_pre_hook(capped_attention(cap)))
        final = getattr(model, "final_norm", None)
        if isinstance(final, DyT | Derf):
            handles.append(
                final.register_forward_pre_hook(norm_hook(f"{names.SATURATION}/final_norm"))
            )
        return handles

    def read(self, logits, step):
        out = {name: torch.stack(hits).sum() / total for name, (hits, total) in self.counts.items()}
        if self.cap is not None:  # the logits come capped: |tanh(z / c)| = |logit| / c
            out[f"{names.SATURATION}/logit_cap"] = (
                (logits.detach().abs() / self.cap >= SATURATED).float().mean()
            )
        return out
