"""The names the stability probes log (metrics.csv columns and wandb keys alike), defined once:
the probes (training/probes/) write them, the analysis and the findings read them. Torch-free,
part of the run dir's contract with runs/runfiles.py.

A per-layer metric is ``<prefix>/layer_{i}`` (``per_layer``), i from 0 for the first block.
"""

from __future__ import annotations

ACT_NORM = "act_norm"  # per layer: the residual stream's RMS after the block
ACT_MAX = "act_max"  # per layer: its largest |value|
BLOCK_COS = "block_cos"  # per layer: cos(block input, block output), mean over positions
ATTN_ENTROPY = "attn/entropy"  # per layer: mean over heads of each head's mean row entropy
ATTN_ENTROPY_MIN = "attn/entropy_min"  # per layer: the lowest head's
MAX_LOGIT = "attn/max_logit"  # the largest q.k / sqrt(d_head) (also per layer)
LOG_Z = "logits/log_z"  # mean over the probe batch's positions of logsumexp(logits)
LOG_Z_RMS = "logits/log_z_rms"
UPDATE = "update/model"  # DeepNet's ||F(x, theta_t) - F(x, theta_0)|| on the probe batch
GRAD_NORM = "grad_norm"  # /total, per layer (and /attn, /mlp), /last_fc2
GRAD_TOTAL = f"{GRAD_NORM}/total"
LAST_FC2 = f"{GRAD_NORM}/last_fc2"  # the last block's FFN output weight (Xiong et al.'s W^{2,L})

# The instruments (off unless named in probes.enabled; training/probes/instruments.py, weights.py)
ATTN_SINK = "attn/sink"  # per layer: share of (sample, head) whose attention on token 0 is > 0.3
ATTN_FIRST = "attn/first_token"  # per layer: mean over heads of that attention
ACT_MASSIVE = "act_massive"  # per layer: max |h| / median |h| of the block's output
ACT_MASSIVE_CHANNEL = "act_massive/channel"  # per layer: the channel the max sits on
ACT_MASSIVE_TOKEN = "act_massive/token"  # per layer: the position it sits on
STREAM_SPREAD = "streams/spread"  # per layer: the residual streams' spread (model.streams > 1)
ACT_MASSIVE_ABS = "act_massive/abs"  # per layer: max |h| itself
ACT_MASSIVE_COUNT = "act_massive/count"  # per layer: |h| > 100 and > 1000 x median |h| (Sun et al.)
ACT_KURTOSIS = "act_kurtosis"  # per layer: kurtosis of the neurons' RMS (He et al. 2024)
LINEAR_OUT = "linear_out"  # linear_out/{q,k,v,proj,fc1,fc2}/layer_{i}: RMS of that output
HEADROOM_FP16 = "headroom/fp16"  # log2(fp16 max / largest |activation|): doublings left
HEADROOM_BF16 = "headroom/bf16"
HEADROOM_ABSMAX = "headroom/absmax"  # the largest |activation| itself
SATURATION = "saturation"  # saturation/{norm,ax2,attn_cap}/layer_{i}, /final_norm, /logit_cap
SPECTRAL = "spectral"  # spectral/{q,k,v,proj,fc1,fc2}/layer_{i}: the largest singular value
STABLE_RANK = "stable_rank"  # the same matrices' ||W||_F^2 / sigma_max^2
ADAM_M = "adam/m"  # per layer: ||m|| (Adam's first moment) of the block's parameters
ADAM_V = "adam/v"  # per layer: ||v|| (second moment)
ADAM_UPDATE = "adam/update"  # per layer and /total: ||lr * m_hat / (sqrt(v_hat) + eps)||
LAYER_DROP = "layer_drop"  # per layer: loss without block i - loss with every block
SPIKE_LOSS_Z = "spike/loss_z"  # |loss - mean| / std over the previous window (OLMo-core's rule)
SPIKE_GRAD_Z = "spike/grad_z"  # the same for the total gradient norm
GUARD_SKIPPED = "guard/skipped_steps"  # optim.guards: the count so far, logged when it rises
GUARD_CLIPPED = "guard/clipped_updates"
GUARD_ZCLIPPED = "guard/zclipped_steps"


def per_layer(prefix: str, i: int | str) -> str:
    """The name of layer ``i``'s value of a per-layer metric (``"*"``: every layer's, a pattern)."""
    return f"{prefix}/layer_{i}"
