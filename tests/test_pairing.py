"""Paired designs are paired: arms that differ only in the schedule (F2's warmup), the loss
(F12's z-loss) or QK-norm (F6, F10) start from the same weights and see the same batches at the
same seed, built the way train.py builds a run (and F18's interventions: the embeddings' scale
and norm, the optimizer, the guards, the simulated fp16 forward). This is what licenses
comparing those arms seed by seed (a paired interval) instead of as independent samples."""

from __future__ import annotations

import lightning.pytorch as L
import pytest
import torch

from training.build import build_data, build_model
from training.run_config import typed_config

# (experiment, the override that makes the two arms, its two values)
PAIRED = [
    ("f2_warmup", "optim.warmup_steps", ("0", "100")),
    ("f12_z_loss", "optim.z_loss", ("0.0", "1e-4")),
    ("f6_lr_sensitivity", "model.qk_norm", ("false", "true")),
    ("f10_entropy", "model.qk_norm", ("false", "true")),
    # F18's interventions against plain Pre-LN (a value's extra overrides after a space)
    ("f18_instruments", "model.emb_norm", ("false", "true model.emb_scale=true")),
    ("f18_instruments", "optim", ("adamw", "adam_atan2 ~optim.fused")),
    ("f18_instruments", "optim.guards", ("[]", "[skip_step]")),
    ("f18_instruments", "model.sim_dtype", ("null", "fp16")),
]
SMALL = ["model.n_layer=2", "trainer.max_steps=200", "optim.warmup_steps=0", "num_threads=1"]


def built(compose_cfg, tmp_path, experiment: str, overrides: list[str], seed: int):
    """The model and the first three train batches of one arm, as train.py seeds and builds
    them."""
    cfg = compose_cfg([f"experiment={experiment}", *SMALL, *overrides, f"seed={seed}",
                       f"run_dir={tmp_path}", f"data.cache_dir={tmp_path / 'cache'}"])  # fmt: skip
    run = typed_config(cfg)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    dm = build_data(run)
    model = build_model(run, dm)
    return model.state_dict(), [dm.train_batch(step) for step in range(3)]


@pytest.mark.parametrize("experiment,key,values", PAIRED, ids=[p[0] for p in PAIRED])
def test_paired_arms_share_weights_and_batches(experiment, key, values, compose_cfg, tmp_path):
    (wa, ba), (wb, bb) = (
        built(compose_cfg, tmp_path, experiment, f"{key}={v}".split(" "), seed=3) for v in values
    )
    shared = set(wa) & set(wb)
    assert shared and shared == set(wa)  # the other arm adds (QK-norm's norms) but removes none
    assert all(torch.equal(wa[k], wb[k]) for k in shared)
    for (xa, ya), (xb, yb) in zip(ba, bb, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    # The check can fail: another seed starts elsewhere and reads other batches.
    wc, bc = built(compose_cfg, tmp_path, experiment, f"{key}={values[0]}".split(" "), seed=4)
    assert not all(torch.equal(wa[k], wc[k]) for k in shared)
    assert not torch.equal(ba[0][0], bc[0][0])
