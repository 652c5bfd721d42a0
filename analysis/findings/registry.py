"""The published claims each reproduction checks: every finding, its experiment, its claims, the
check that decides each (the checks live in one module per family: init, depth, norms, lr,
placements, stability) and the margins it is decided by, fixed here before the sweep runs (their
values and reasons: analysis/findings/claims.py).
"""

from __future__ import annotations

from analysis.findings.claims import (
    ACC_FLAT,
    ACC_GAP,
    CLOSE,
    DEEP_OK,
    F4_TOL,
    FAILS,
    FLAT_RATIO,
    FLAT_SLOPE,
    GROW_RATIO,
    SHRINK_SLOPE,
    UPDATE_RATIO,
    WORSE,
    Claim,
    Figure,
    Finding,
)
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
from analysis.findings.norms import (
    f7_batchnorm_degrades,
    f7_token_norms_flat,
    rmsnorm_matches,
)
from analysis.findings.placements import (
    no_worse,
    stalls_above,
)
from analysis.findings.registry_probes import PROBED

XIONG, LIU, WANG = "Xiong et al. 2020", "Liu et al. 2020", "Wang et al. 2022"


DEPTH_CLAIMS = (
    Claim(
        "deep-post-fails",
        "Post-LN fails at the deepest depth",
        LIU,
        deep_post_fails,
        margins={"fails": FAILS},
    ),
    Claim(
        "deep-others-train",
        "Pre-LN and DeepNorm train at every depth",
        WANG,
        deep_others_train,
        margins={"deep_ok": DEEP_OK},
    ),
    Claim(
        "update-jumps",
        "Post-LN's model update is larger early than DeepNorm's",
        WANG,
        post_update_jumps,
        margins={"update_ratio": UPDATE_RATIO},
    ),
)
# Findings decided from training runs' losses and accuracies; those decided from the probes'
# series are in analysis/findings/registry_probes.py.
TRAINED: dict[str, Finding] = {
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
                margins={"flat_slope": FLAT_SLOPE},
            ),
            Claim(
                "F1b",
                "Pre-LN last-layer FFN grad norm shrinks with depth",
                XIONG,
                f1_pre_grad_shrinks,
                margins={"shrink_slope": SHRINK_SLOPE},
            ),
            Claim(
                "F1c",
                "Post-LN residual norm is flat across layers",
                XIONG,
                f1_post_residual_flat,
                margins={"flat_ratio": FLAT_RATIO},
            ),
            Claim(
                "F1d",
                "Pre-LN residual norm grows across layers",
                XIONG,
                f1_pre_residual_grows,
                margins={"grow_ratio": GROW_RATIO},
            ),
        ),
        mode="init_probe",
        plots=("init_grid.png", "grad_norm_init.png", "act_norm_init.png"),
    ),
    "f2": Finding(
        "f2_warmup",
        "F2: Post-LN needs learning-rate warmup, Pre-LN does not",
        (
            Claim(
                "F2a",
                "Post-LN without warmup ends worse than with it",
                XIONG,
                f2_post_needs_warmup,
                margins={"worse": WORSE},
            ),
            Claim(
                "F2b",
                "Pre-LN without warmup ends as well as with it",
                XIONG,
                f2_pre_no_warmup,
                margins={"close": CLOSE},
            ),
        ),
    ),
    "f3": Finding(
        "f3_depth",
        "F3: depth stability of Post-LN, Pre-LN and DeepNorm; F4: shallow Post-LN ends better",
        (
            *(
                Claim(f"F3{c}", x.statement, x.source, x.check, margins=x.margins)
                for c, x in zip("abc", DEPTH_CLAIMS, strict=True)
            ),
            Claim(
                "F4",
                "Shallow Post-LN with warmup ends at least as well as Pre-LN",
                LIU,
                shallow_post_matches,
                margins={"f4_tol": F4_TOL},
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
                margins={"close": CLOSE},
            ),
        ),
        plots=("lr_sensitivity.png", "loss_curves.png"),
    ),
    "vit": Finding(
        "vit_depth",
        "ViT on digits: depth stability without warmup, each arm at its best learning rate",
        tuple(
            Claim(f"V{i}", x.statement, x.source, x.check, margins=x.margins)
            for i, x in enumerate(DEPTH_CLAIMS, 1)
        ),
        plots=("lr_sensitivity.png", "best_val_vs_depth.png", "model_update.png"),
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
                margins={"acc_gap": ACC_GAP},
            ),
            Claim(
                "F7b",
                "LayerNorm's and RMSNorm's accuracy do not depend on the batch size",
                "Ba et al. 2016; Zhang & Sennrich 2019",
                f7_token_norms_flat,
                margins={"acc_flat": ACC_FLAT},
            ),
        ),
        plots=("loss_curves.png", "acc_vs_batch.png"),
        figures=(Figure("acc_vs_batch.png", "data.batch_size", ("best_val_acc",)),),
    ),
    "placements": Finding(
        "placements_depth",
        "The placements league: every placement 12 layers deep, each at its best learning rate",
        (
            Claim("P1", "Post-LN fails at depth", LIU, deep_post_fails, margins={"fails": FAILS}),
            Claim(
                "P2",
                "Pre-LN trains at depth",
                XIONG,
                trains_deep("pre"),
                margins={"deep_ok": DEEP_OK},
            ),
            Claim(
                "P3",
                "DeepNorm trains at depth",
                WANG,
                trains_deep("deepnorm"),
                margins={"deep_ok": DEEP_OK},
            ),
            Claim(
                "P4",
                "Sandwich-LN trains at depth",
                "Ding et al. 2021; Kim et al. 2025",
                trains_deep("sandwich"),
                margins={"deep_ok": DEEP_OK},
            ),
            Claim(
                "P5",
                "Admin trains at depth",
                LIU,
                trains_deep("admin"),
                margins={"deep_ok": DEEP_OK},
            ),
            Claim(
                "P6",
                "ReZero trains at depth",
                "Bachlechner et al. 2020",
                trains_deep("rezero"),
                margins={"deep_ok": DEEP_OK},
            ),
            Claim(
                "P7",
                "nGPT trains at depth",
                "Loshchilov et al. 2024",
                trains_deep("ngpt"),
                margins={"deep_ok": DEEP_OK},
            ),
        ),
        plots=("lr_sensitivity.png", "loss_curves.png"),
    ),
    "f11": Finding(
        "f11_admin",
        "F11: Admin trains deep Post-LN stacks where plain Post-LN stalls (24 layers, 150 warmup "
        "steps of 600, each arm at its best learning rate)",
        (
            Claim(
                "F11a",
                "Post-LN stalls at the deepest depth",
                LIU,
                stalls_above("post", "pre"),
                margins={"fails": FAILS},
            ),
            Claim(
                "F11b",
                "Admin trains at the depth where Post-LN stalls",
                LIU,
                stalls_above("post", "admin"),
                margins={"fails": FAILS},
            ),
            Claim(
                "F11c",
                "Admin ends at least as well as Pre-LN",
                LIU,
                no_worse("admin", "pre", every_depth=True),
                margins={"close": CLOSE},
            ),
        ),
        plots=("lr_sensitivity.png", "loss_curves.png"),
    ),
}
ORDER = ("f1", "f2", "f3", "f5", "vit", "f6", "f7", "placements", "f8", "f9", "f10", "f11",
         "f12", "f13")  # fmt: skip
FINDINGS: dict[str, Finding] = {k: {**TRAINED, **PROBED}[k] for k in ORDER}
ALIASES = {"f4": "f3"}  # F4 is the shallow arm of the depth sweep
