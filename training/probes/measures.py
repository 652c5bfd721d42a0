"""Forward measures of the residual stream and the output, on the probe batch:

act_norm/layer_{i}    RMS over (batch, position, channel) of h_i, the output of blocks[i]
act_max/layer_{i}     max |h_i| over (batch, position, channel): "massive activations" show
                      here long before they move the RMS (Sun et al. 2024)
block_cos/layer_{i}   mean over (batch, position) of cos(h_{i-1}, h_i), the block's input and
                      output vectors: near 1, the block barely changes its input (Sun et al.
                      2025; Gromov et al. 2024)
update/model          model_update_norm(F(x, theta_s), F(x, theta_0)) (DeepNet)
logits/log_z          mean over positions of log Z = logsumexp_v(logits_v): the log partition
                      function the softmax divides by; z-loss pulls it to 0 (PaLM; Wortsman et
                      al. 2023)
logits/log_z_rms      sqrt(mean(log Z^2)), what z-loss penalizes (mean log Z may hide spread)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_warn

from runs import metric_names as names
from training.probes.forward import ForwardMeasure


class BlockOutputs(ForwardMeasure):
    """A measure of each block's (input, output) pair, kept per layer; subclasses say which."""

    prefix = ""

    def measure(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def attach(self, model):
        self.per_layer: dict[int, torch.Tensor] = {}

        def hook(i: int):
            def fn(module, inputs, output):
                self.per_layer[i] = self.measure(inputs[0], output)

            return fn

        return [block.register_forward_hook(hook(i)) for i, block in enumerate(model.blocks)]

    def read(self, logits, step):
        return {names.per_layer(self.prefix, i): v for i, v in sorted(self.per_layer.items())}


class ActNorm(BlockOutputs):
    """Residual-stream RMS after each block."""

    prefix = names.ACT_NORM

    def measure(self, x, h):
        return h.float().square().mean().sqrt()


class ActMax(BlockOutputs):
    """Largest |value| of the residual stream after each block."""

    prefix = names.ACT_MAX

    def measure(self, x, h):
        return h.float().abs().amax()


class BlockCos(BlockOutputs):
    """Mean cosine between each position's residual vector before and after the block."""

    prefix = names.BLOCK_COS

    def measure(self, x, h):
        return F.cosine_similarity(x.float(), h.float(), dim=-1).mean()


def model_update_norm(logits: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """DeepNet's ||F(x, theta_t) - F(x, theta_0)||, made independent of the probe batch size:

        sqrt( sum (logits - ref)^2 / P ),   P = logits.numel() / logits.shape[-1]

    i.e. the root-mean-square over the P positions (B*T for the GPT, B for the ViT) of the L2 norm
    of each position's logit difference.
    """
    positions = logits.numel() // logits.shape[-1]
    return ((logits.float() - ref.float()).square().sum() / positions).sqrt()


class ModelUpdate(ForwardMeasure):
    """Distance of the probe-batch logits from those at step 0 (only those logits are kept)."""

    def __init__(self) -> None:
        self.ref: torch.Tensor | None = None
        self.warned = False

    def read(self, logits, step):
        if self.ref is None:
            if step != 0:
                if not self.warned:
                    rank_zero_warn(f"update/model needs the step-0 logits; not logged from {step}")
                    self.warned = True
                return {}
            self.ref = logits.detach().float().clone()
        return {names.UPDATE: model_update_norm(logits, self.ref.to(logits.device))}

    def state_dict(self):
        return {"ref": None if self.ref is None else self.ref.cpu()}

    def load_state_dict(self, state):
        self.ref = state.get("ref")


class LogZ(ForwardMeasure):
    """log Z of the output logits, averaged over the probe batch's positions."""

    def read(self, logits, step):
        log_z = logits.float().logsumexp(dim=-1)  # (B, T) or (B,)
        return {names.LOG_Z: log_z.mean(), names.LOG_Z_RMS: log_z.square().mean().sqrt()}
