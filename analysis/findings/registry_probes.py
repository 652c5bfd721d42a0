"""The findings decided from the probes' series (attention logits and entropy, the residual
stream, log Z, the block profile), each with its claims and the margins each is decided by, fixed
here before the sweep runs (their values and reasons: analysis/findings/claims.py). The findings
decided from losses and accuracies, and the registry's order: analysis/findings/registry.py.
"""

from __future__ import annotations

from analysis.block_profile import plot_profiles
from analysis.findings.claims import (
    CLOSE,
    COS_DROP,
    DRIFT,
    FLOOR,
    GROWS,
    LOGIT_GROWTH,
    NEAR_ONE,
    RMS_GROWTH,
    SENS_GAP,
    SMALL,
    SPAN,
    WORSE,
    Claim,
    Figure,
    Finding,
)
from analysis.findings.lr import (
    WORTSMAN,
    f6_logit_grows,
    f6_qk_bounded,
    f6_qk_ends_better,
    f6_qk_lowers_sensitivity,
    f13_combined_flat,
    flattens,
)
from analysis.findings.placements import (
    f9_late_blocks_idle,
    f9_lns_lowers_cos,
    f9_rms_grows,
    no_worse,
)
from analysis.findings.stability import (
    KIM,
    ZHAI,
    f8_peri_grows_slower,
    f8_pre_grows_in_training,
    f8_pre_grows_with_depth,
    f10_collapse_is_instability,
    f10_entropy_collapses,
    f10_qk_prevents,
    f12_log_z_drifts,
    f12_z_loss_costs_nothing,
    f12_z_loss_keeps_small,
)

SUN = "Sun et al. 2025"

PROBED: dict[str, Finding] = {
    "f6": Finding(
        "f6_lr_sensitivity",
        "F6: attention logits at high learning rates, QK-norm and LR sensitivity",
        (
            Claim(
                "F6a",
                "Without QK-norm the max attention logit grows with the learning rate",
                WORTSMAN,
                f6_logit_grows,
                margins={"logit_growth": LOGIT_GROWTH},
            ),
            Claim(
                "F6b",
                "With QK-norm the max attention logit stays bounded",
                WORTSMAN,
                f6_qk_bounded,
                margins={"logit_growth": LOGIT_GROWTH},
            ),
            Claim(
                "F6c",
                "At the highest learning rates QK-norm ends with a lower loss",
                WORTSMAN,
                f6_qk_ends_better,
                margins={"worse": WORSE},
            ),
            Claim(
                "F6d",
                "QK-norm lowers the LR sensitivity",
                WORTSMAN,
                f6_qk_lowers_sensitivity,
                margins={"sens_gap": SENS_GAP},
            ),
        ),
        plots=("lr_sensitivity.png", "lr_sweep.png", "loss_curves.png"),
        figures=(Figure("lr_sweep.png", "optim.lr", ("max:attn/max_logit", "final_val_loss")),),
    ),
    "f8": Finding(
        "f8_residual",
        "F8: the residual stream of Pre-LN grows with depth and training; Peri-LN bounds it",
        (
            Claim(
                "F8a",
                "In Pre-LN the residual stream's RMS grows with depth",
                KIM,
                f8_pre_grows_with_depth,
                margins={"grows": GROWS},
            ),
            Claim(
                "F8b",
                "In Pre-LN the residual stream's RMS and largest values grow in training",
                KIM,
                f8_pre_grows_in_training,
                margins={"grows": GROWS},
            ),
            Claim(
                "F8c",
                "Peri-LN's (sandwich's) residual stream RMS grows more slowly in training than "
                "Pre-LN's (more balanced variance growth)",
                KIM,
                f8_peri_grows_slower,
                margins={"grows": GROWS},
            ),
        ),
        plots=("heat_act_norm.png", "heat_act_max.png", "loss_curves.png"),
    ),
    "f9": Finding(
        "f9_depth_curse",
        "F9: the curse of depth in Pre-LN, and LayerNorm Scaling",
        (
            Claim(
                "F9a",
                "Pre-LN's residual stream RMS still grows in the later half",
                SUN,
                f9_rms_grows,
                margins={"rms_growth": RMS_GROWTH},
            ),
            Claim(
                "F9b",
                "Pre-LN's later blocks barely change their input (cosine near 1)",
                SUN,
                f9_late_blocks_idle,
                margins={"near_one": NEAR_ONE},
            ),
            Claim(
                "F9c",
                "LayerNorm Scaling lowers the later half's cosine",
                SUN,
                f9_lns_lowers_cos,
                margins={"cos_drop": COS_DROP, "rms_growth": RMS_GROWTH},
            ),
            Claim(
                "F9d",
                "LayerNorm Scaling ends no worse than Pre-LN",
                SUN,
                no_worse("lns", "pre", every_depth=False),
                margins={"close": CLOSE},
            ),
        ),
        plots=("block_profile.png", "heat_block_cos.png", "loss_curves.png"),
        draws=(plot_profiles,),
    ),
    "f10": Finding(
        "f10_entropy",
        "F10: attention entropy collapse at high learning rates, and QK-norm",
        (
            Claim(
                "F10a",
                "Without QK-norm attention entropy collapses (to near 0) at high learning rates",
                ZHAI,
                f10_entropy_collapses,
                margins={"floor": FLOOR},
            ),
            Claim(
                "F10b",
                "QK-norm prevents the entropy collapse",
                "Dehghani et al. 2023 (QK-layernorm against near-one-hot attention); Zhai et al. "
                "2023 propose sigmaReparam instead",
                f10_qk_prevents,
                margins={"floor": FLOOR},
            ),
            Claim(
                "F10c",
                "The runs whose entropy collapsed are the unstable ones (diverge or end worse)",
                ZHAI,
                f10_collapse_is_instability,
                margins={"floor": FLOOR, "worse": WORSE},
            ),
        ),
        plots=("heat_attn_entropy_min.png", "entropy_vs_lr.png", "sharpness.png"),
        figures=(
            Figure(
                "entropy_vs_lr.png",
                "optim.lr",
                ("min_attn_entropy", "max:attn/max_logit", "best_val_loss"),
            ),
        ),
    ),
    "f12": Finding(
        "f12_z_loss",
        "F12: output logit drift (log Z) at high learning rates, and z-loss",
        (
            Claim(
                "F12a",
                "Without z-loss log Z diverges (falls far below 0) at high learning rates",
                WORTSMAN,
                f12_log_z_drifts,
                margins={"drift": DRIFT, "grows": GROWS},
            ),
            Claim(
                "F12b",
                "z-loss 1e-4 keeps |log Z| small at a high learning rate",
                WORTSMAN,
                f12_z_loss_keeps_small,
                margins={"small": SMALL},
            ),
            Claim(
                "F12c",
                "z-loss 1e-4 costs no final loss (each arm at its best learning rate)",
                WORTSMAN,
                f12_z_loss_costs_nothing,
                margins={"close": CLOSE},
            ),
        ),
        plots=("log_z.png", "log_z_vs_lr.png", "loss_curves.png"),
        figures=(Figure("log_z_vs_lr.png", "optim.lr", ("last:logits/log_z", "best_val_loss")),),
    ),
    "f13": Finding(
        "f6_lr_sensitivity",  # F6's sweep crosses QK-norm with z-loss: F13 reads the same runs
        "F13: final loss against the learning rate with qk-layernorm and z-loss (Wortsman et al. "
        "2023, Figure 1)",
        (
            Claim(
                "F13a",
                "qk-layernorm flattens the loss-vs-lr curve at high rates (lower LR sensitivity) "
                "while the best loss stays",
                WORTSMAN,
                flattens(base_qk=False, qk=True, z_arm=False),
                margins={"sens_gap": SENS_GAP, "close": CLOSE},
            ),
            Claim(
                "F13b",
                "With qk-layernorm on, z-loss lowers the LR sensitivity while the best loss "
                "stays (the paper's pair: qk vs qk + z-loss)",
                WORTSMAN,
                flattens(base_qk=True, qk=True, z_arm=True),
                margins={"sens_gap": SENS_GAP, "close": CLOSE, "drift": DRIFT},
            ),
            Claim(
                "F13c",
                "With two of the paper's combined interventions, qk-layernorm and z-loss, the "
                "loss is similar across orders of magnitude of lr (the paper's flat curve also "
                "has longer warmup, independent decay and muParam, not tested here)",
                WORTSMAN,
                f13_combined_flat,
                margins={"worse": WORSE, "span": SPAN},
            ),
        ),
        plots=("lr_sensitivity.png", "loss_curves.png"),
    ),
}
