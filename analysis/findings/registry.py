"""The published claims each reproduction checks: every finding, its experiment, its claims and
the check that decides each (the checks live in one module per family: init, depth, norms, lr,
stability).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from analysis.block_profile import plot_profiles
from analysis.findings.common import Check
from analysis.findings.depth import (
    deep_others_train,
    deep_post_fails,
    f2_post_needs_warmup,
    f2_pre_no_warmup,
    post_update_jumps,
    shallow_post_matches,
    trains_deep,
)
from analysis.findings.init import (
    f1_post_grad_flat,
    f1_post_residual_flat,
    f1_pre_grad_shrinks,
    f1_pre_residual_grows,
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
from analysis.findings.norms import (
    f7_batchnorm_degrades,
    f7_token_norms_flat,
    rmsnorm_matches,
)
from analysis.findings.placements import (
    f9_late_blocks_idle,
    f9_lns_lowers_cos,
    f9_rms_grows,
    no_worse,
    stalls_above,
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

XIONG, LIU, WANG = "Xiong et al. 2020", "Liu et al. 2020", "Wang et al. 2022"
SUN = "Sun et al. 2025"


@dataclass(frozen=True)
class Claim:
    id: str
    statement: str
    source: str
    check: Check


@dataclass(frozen=True)
class Figure:
    """``python scripts/compare.py SWEEP --x <x> --y <ys>``, written as report/<name>."""

    name: str
    x: str
    ys: tuple[str, ...]


@dataclass(frozen=True)
class Finding:
    experiment: str  # conf/experiment/<experiment>.yaml; the GPU size is <experiment>_gpu
    title: str
    claims: tuple[Claim, ...]
    kind: str = "train"  # the mode its runs use: train | init_probe
    plots: tuple[str, ...] = ("loss_curves.png",)  # the report's key figures (for --publish)
    figures: tuple[Figure, ...] = ()  # swept key vs results, drawn into the report as well
    # Other figures a finding needs, each drawn from the sweep dir into its report/.
    draws: tuple[Callable[[Path], Path], ...] = ()


DEPTH_CLAIMS = (
    Claim("deep-post-fails", "Post-LN fails at the deepest depth", LIU, deep_post_fails),
    Claim("deep-others-train", "Pre-LN and DeepNorm train at every depth", WANG, deep_others_train),
    Claim(
        "update-jumps",
        "Post-LN's model update is larger early than DeepNorm's",
        WANG,
        post_update_jumps,
    ),
)
FINDINGS: dict[str, Finding] = {
    "f1": Finding(
        "f1_init",
        "F1: gradients and residual norms at initialization vs depth",
        (
            Claim(
                "F1a",
                "Post-LN's last-layer FFN grad norm does not scale with depth (Theorem 1 bounds it "
                "independently of L)",
                XIONG,
                f1_post_grad_flat,
            ),
            Claim(
                "F1b",
                "Pre-LN last-layer FFN grad norm shrinks with depth",
                XIONG,
                f1_pre_grad_shrinks,
            ),
            Claim(
                "F1c", "Post-LN residual norm is flat across layers", XIONG, f1_post_residual_flat
            ),
            Claim("F1d", "Pre-LN residual norm grows across layers", XIONG, f1_pre_residual_grows),
        ),
        kind="init_probe",
        plots=("init_grid.png", "grad_norm_init.png", "act_norm_init.png"),
    ),
    "f2": Finding(
        "f2_warmup",
        "F2: Post-LN needs learning-rate warmup, Pre-LN does not",
        (
            Claim(
                "F2a", "Post-LN without warmup ends worse than with it", XIONG, f2_post_needs_warmup
            ),
            Claim("F2b", "Pre-LN without warmup ends as well as with it", XIONG, f2_pre_no_warmup),
        ),
    ),
    "f3": Finding(
        "f3_depth",
        "F3: depth stability of Post-LN, Pre-LN and DeepNorm; F4: shallow Post-LN ends better",
        (
            *(
                Claim(f"F3{c}", x.statement, x.source, x.check)
                for c, x in zip("abc", DEPTH_CLAIMS, strict=True)
            ),
            Claim(
                "F4",
                "Shallow Post-LN with warmup ends at least as well as Pre-LN",
                LIU,
                shallow_post_matches,
            ),
        ),
        plots=("lr_sensitivity.png", "best_val_vs_depth.png", "model_update.png"),
    ),
    "f5": Finding(
        "f5_norms",
        "F5: RMSNorm matches LayerNorm",
        (
            Claim(
                "F5",
                "RMSNorm's best val loss matches LayerNorm's",
                "Zhang & Sennrich 2019",
                rmsnorm_matches,
            ),
        ),
        plots=("lr_sensitivity.png", "loss_curves.png"),
    ),
    "vit": Finding(
        "vit_depth",
        "ViT on digits: depth stability without warmup, each arm at its best learning rate",
        tuple(
            Claim(f"V{i}", x.statement, x.source, x.check) for i, x in enumerate(DEPTH_CLAIMS, 1)
        ),
        plots=("lr_sensitivity.png", "best_val_vs_depth.png", "model_update.png"),
    ),
    "f6": Finding(
        "f6_lr_sensitivity",
        "F6: attention logits at high learning rates, QK-norm and LR sensitivity",
        (
            Claim(
                "F6a",
                "Without QK-norm the max attention logit grows with the learning rate",
                WORTSMAN,
                f6_logit_grows,
            ),
            Claim(
                "F6b", "With QK-norm the max attention logit stays bounded", WORTSMAN, f6_qk_bounded
            ),
            Claim(
                "F6c",
                "At the highest learning rates QK-norm ends with a lower loss",
                WORTSMAN,
                f6_qk_ends_better,
            ),
            Claim("F6d", "QK-norm lowers the LR sensitivity", WORTSMAN, f6_qk_lowers_sensitivity),
        ),
        plots=("lr_sensitivity.png", "lr_sweep.png", "loss_curves.png"),
        figures=(Figure("lr_sweep.png", "optim.lr", ("max:attn/max_logit", "final_val_loss")),),
    ),
    "f7": Finding(
        "f7_batch_stats",
        "F7: BatchNorm depends on the batch size; LayerNorm and RMSNorm do not",
        (
            Claim(
                "F7a",
                "BatchNorm's accuracy drops at a small batch more than LayerNorm's and RMSNorm's",
                "Ioffe & Szegedy 2015; Wu & He 2018",
                f7_batchnorm_degrades,
            ),
            Claim(
                "F7b",
                "LayerNorm's and RMSNorm's accuracy do not depend on the batch size",
                "Ba et al. 2016; Zhang & Sennrich 2019",
                f7_token_norms_flat,
            ),
        ),
        plots=("loss_curves.png", "acc_vs_batch.png"),
        figures=(Figure("acc_vs_batch.png", "data.batch_size", ("best_val_acc",)),),
    ),
    "placements": Finding(
        "placements_depth",
        "The placements league: every placement 12 layers deep, each at its best learning rate",
        (
            Claim("P1", "Post-LN fails at depth", LIU, deep_post_fails),
            Claim("P2", "Pre-LN trains at depth", XIONG, trains_deep("pre")),
            Claim("P3", "DeepNorm trains at depth", WANG, trains_deep("deepnorm")),
            Claim(
                "P4",
                "Sandwich-LN trains at depth",
                "Ding et al. 2021; Kim et al. 2025",
                trains_deep("sandwich"),
            ),
            Claim("P5", "Admin trains at depth", LIU, trains_deep("admin")),
            Claim("P6", "ReZero trains at depth", "Bachlechner et al. 2020", trains_deep("rezero")),
            Claim("P7", "nGPT trains at depth", "Loshchilov et al. 2024", trains_deep("ngpt")),
        ),
        plots=("lr_sensitivity.png", "loss_curves.png"),
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
            ),
            Claim(
                "F8b",
                "In Pre-LN the residual stream's RMS and largest values grow in training",
                KIM,
                f8_pre_grows_in_training,
            ),
            Claim(
                "F8c",
                "Peri-LN's (sandwich's) residual stream RMS grows more slowly in training than "
                "Pre-LN's (more balanced variance growth)",
                KIM,
                f8_peri_grows_slower,
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
            ),
            Claim(
                "F9b",
                "Pre-LN's later blocks barely change their input (cosine near 1)",
                SUN,
                f9_late_blocks_idle,
            ),
            Claim(
                "F9c", "LayerNorm Scaling lowers the later half's cosine", SUN, f9_lns_lowers_cos
            ),
            Claim(
                "F9d",
                "LayerNorm Scaling ends no worse than Pre-LN",
                SUN,
                no_worse("lns", "pre", every_depth=False),
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
            ),
            Claim(
                "F10b",
                "QK-norm prevents the entropy collapse",
                "Dehghani et al. 2023 (QK-layernorm against near-one-hot attention); Zhai et al. "
                "2023 propose sigmaReparam instead",
                f10_qk_prevents,
            ),
            Claim(
                "F10c",
                "The runs whose entropy collapsed are the unstable ones (diverge or end worse)",
                ZHAI,
                f10_collapse_is_instability,
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
    "f11": Finding(
        "f11_admin",
        "F11: Admin trains deep Post-LN stacks where plain Post-LN stalls (24 layers, 150 warmup "
        "steps of 600, each arm at its best learning rate)",
        (
            Claim("F11a", "Post-LN stalls at the deepest depth", LIU, stalls_above("post", "pre")),
            Claim(
                "F11b",
                "Admin trains at the depth where Post-LN stalls",
                LIU,
                stalls_above("post", "admin"),
            ),
            Claim(
                "F11c",
                "Admin ends at least as well as Pre-LN",
                LIU,
                no_worse("admin", "pre", every_depth=True),
            ),
        ),
        plots=("lr_sensitivity.png", "loss_curves.png"),
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
            ),
            Claim(
                "F12b",
                "z-loss 1e-4 keeps |log Z| small at a high learning rate",
                WORTSMAN,
                f12_z_loss_keeps_small,
            ),
            Claim(
                "F12c",
                "z-loss 1e-4 costs no final loss (each arm at its best learning rate)",
                WORTSMAN,
                f12_z_loss_costs_nothing,
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
            ),
            Claim(
                "F13b",
                "With qk-layernorm on, z-loss lowers the LR sensitivity while the best loss "
                "stays (the paper's pair: qk vs qk + z-loss)",
                WORTSMAN,
                flattens(base_qk=True, qk=True, z_arm=True),
            ),
            Claim(
                "F13c",
                "With two of the paper's combined interventions, qk-layernorm and z-loss, the "
                "loss is similar across orders of magnitude of lr (the paper's flat curve also "
                "has longer warmup, independent decay and muParam, not tested here)",
                WORTSMAN,
                f13_combined_flat,
            ),
        ),
        plots=("lr_sensitivity.png", "loss_curves.png"),
    ),
}
ALIASES = {"f4": "f3"}  # F4 is the shallow arm of the depth sweep
