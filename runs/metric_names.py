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


def per_layer(prefix: str, i: int) -> str:
    """The name of layer ``i``'s value of a per-layer metric."""
    return f"{prefix}/layer_{i}"
