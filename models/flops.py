"""Training FLOPs per token, defined once (PaLM, Chowdhery et al. 2022, appendix B): 6 FLOPs per
parameter per token (forward and backward matmuls) plus the attention's 12 L T d. Pure Python:
the models count their exact parameters with it, and the sweep estimate (scripts/reproduce)
its estimate of them, without building a model.
"""

from __future__ import annotations


def training_flops_per_token(n_params: float, n_layer: int, context: int, width: int) -> float:
    """``n_params``: the parameters every token's matmuls touch (no position table)."""
    return 6 * n_params + 12 * n_layer * context * width
