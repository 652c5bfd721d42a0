"""Every finding and its claims, declared (analysis/findings/declare.py says what the fields
mean, judge.py how they are decided). A change to a claim here changes its hash: a claim
changed after its confirmatory run is exploratory again, and the change goes into its finding's
ledger (docs/findings/<id>/README.md) with the verdict before and after on the same data.

Margins, one value per word across the findings, on each measure's own scale:
    WORSE = 0.10 nats   "ends worse" (GPT losses ~2 nats)
    CLOSE = 0.05 nats   "matches" / "as well as" / "costs nothing"
    FAILS = 0.20 nats   "fails at depth": a gap no seed noise reaches (a stalled Post-LN sits
                        0.6-2 above)
    DEEP_OK = 0.30 nats "trains at depth": deepest within this of the shallowest; with one
                        depth, ends at least this far below the unigram loss
    F4_TOL = 0.02 nats  "slightly better"
    FACTOR = 1.5        losses of the ViT (0.1-0.4 nats): the same words as a ratio of losses
    MOST = 0.5          "trains" as a rate: more than half of the runs train (exact interval)
    UPDATE_RATIO = 2.0  "update larger early" (DeepNet reports orders of magnitude)
    FLAT_SLOPE = 0.15   F1 "bounded independently of L": log-log slope at most this (theory 0)
    SHRINK_SLOPE = -0.3 F1 "shrinks": slope under this (theory -0.5)
    FLAT_RATIO = 1.5    F1c "flat across layers": last/first within [1/1.5, 1.5]
    GROW_RATIO = 2.0    F1 "grows across layers"
    LOGIT_GROWTH = 10   the max attention logit rises >= sqrt(10) a decade of lr; at the top lr
                        QK-norm's is >= 10x below
    SENS_GAP = 0.03     "lowers the LR sensitivity": about one seed sd of a sensitivity
    SPAN_UP = 10        F13c "similar loss across lr": within 0.10 of the best up to 10x above it
    ACC_FACTOR = 1.25   F7: a val-loss factor (accuracy sits at its ceiling, ~0.97)
    RMS_GROWTH = 1.2, NEAR_ONE = 0.9, COS_DROP = 0.01   F9 (linear variance growth: 1.41)
    GROWS = 2.0         "grows" / "far above"
    FLOOR = 0.1 nats    "entropy collapses": one key taking 99% of a row leaves ~0.08
    DRIFT = 1.0 nat     "log Z diverges": falls this far below its end-of-warmup value
    LONG_RUN = 1e4      steps: Wortsman et al.'s output-logit divergence comes late in ~1e5
    SINKS = 0.1         F18 "sinks emerge": one head in ten is a sink (Gu et al.'s epsilon 0.3)
    MASSIVE = 100       F18 "massive activations": Sun et al. see 1e3-1e4 x the median at scale
    SHIFT = 0.25        F14 "the best lr moves": its log10 moves at least a quarter decade (half
                        the grid's step; SP's theory for Adam's hidden rates: 0.6 for 4x width)
    BAND = 0.25         F14 "the best lr stays": its log10 moves less than a quarter decade

Seeds per arm (``seeds``): SEEDS for an interval claim, RATE_SEEDS for a rate, where a rate's
exact interval of n out of n first clears MOST at n = 6; the pilots' power calculation that
fixes them claim by claim is docs/reproducing.md's next step, before the freeze.
"""

from __future__ import annotations

from typing import Any

from analysis.block_profile import plot_profiles
from analysis.findings.declare import EACH, MAX, MIN, REF_LR, RUN_LR, Claim, Figure, Finding, Gate
from analysis.findings.declare import Part as P

WORSE, CLOSE, FAILS, DEEP_OK, F4_TOL, FACTOR, MOST = 0.10, 0.05, 0.20, 0.30, 0.02, 1.5, 0.5
UPDATE_RATIO, FLAT_SLOPE, SHRINK_SLOPE, FLAT_RATIO, GROW_RATIO = 2.0, 0.15, -0.3, 1.5, 2.0
LOGIT_GROWTH, SENS_GAP, SPAN_UP, ACC_FACTOR = 10.0, 0.03, 10.0, 1.25
RMS_GROWTH, NEAR_ONE, COS_DROP, GROWS, FLOOR, DRIFT, LONG_RUN = 1.2, 0.9, 0.01, 2.0, 0.1, 1.0, 1e4
SINKS, MASSIVE = 0.1, 100.0
SHIFT, BAND = 0.25, 0.25  # F14, decades of lr (the grid's step is 0.5)
SEEDS, RATE_SEEDS = 5, 6  # the floors; a claim's own n: scripts/plan_seeds.py's table

XIONG, LIU, WANG = "Xiong et al. 2020", "Liu et al. 2020", "Wang et al. 2022"
WORTSMAN, SUN, ZHAI = "Wortsman et al. 2023", "Sun et al. 2025", "Zhai et al. 2023"
KIM = "Kim et al. 2025; Sun et al. 2024"
QK, Z, BATCH = "model.qk_norm", "optim.z_loss", "data.batch_size"
SHORT = "runs of a few hundred steps at d=64 on a small text corpus"
SIZE18 = "0.6M parameters for 200 steps on 100k characters; the papers' models have 100M-70B"


def C(cid: str, statement: str, source: str, *parts: P, seeds: int = SEEDS, **more: Any) -> Claim:
    return Claim(cid, statement, source, parts, seeds, **more)


def at(placement: str, depth: Any = MAX, **more: Any) -> dict:
    return {"placement": placement, "n_layer": depth, **more}


def cold(placement: str, depth: Any = MAX) -> dict:
    """A ViT arm of the grid without warmup (V3's arm runs with warmup at one rate)."""
    return at(placement, depth, warmup_steps=0)


def trains(
    cid: str,
    placement: str,
    source: str,
    statement: str = "",
    seeds: int = RATE_SEEDS,
    arm: dict | None = None,
) -> Claim:
    """The league's "X trains at depth": most runs train, and end DEEP_OK below the unigram."""
    arm = arm or at(placement)
    return C(
        cid,
        statement or f"{placement} trains at depth (12 layers)",
        source,
        P("rate", (arm,), MOST, "above", event="trained"),
        P("mean", (arm,), DEEP_OK, "above", measure="unigram_gap"),
        seeds=seeds,
        departs=SHORT,
    )


def worse_at_depth(cid: str, statement: str, worse: str, *better: str) -> Claim:
    parts = [P("diff", (at(worse), at(b)), FAILS, "above") for b in better]
    return C(cid, statement, LIU, *parts, departs=SHORT)


# fmt: off
F1 = Finding("f1_init", "F1: gradients and residual norms at initialization vs depth", (
    C("F1a", "Post-LN's last-layer FFN gradient norm does not grow with depth (Theorem 1 bounds "
      "it independently of L)", XIONG,
      P("slope", ({"placement": "post"},), FLAT_SLOPE, "below", measure="last_fc2"), lr="fixed"),
    C("F1b", "Pre-LN's last-layer FFN gradient norm shrinks with depth", XIONG,
      P("slope", ({"placement": "pre"},), SHRINK_SLOPE, "below", measure="last_fc2"), lr="fixed"),
    C("F1c", "Post-LN's residual norm is flat across layers (an implementation check: each "
      "Post-LN block ends in a unit-gain LayerNorm)", XIONG,
      P("ratio", (at("post"),), 1 / FLAT_RATIO, "above", measure="act_ratio"),
      P("ratio", (at("post"),), FLAT_RATIO, "below", measure="act_ratio"),
      lr="fixed", counted=False),
    C("F1d", "Pre-LN's residual norm grows across layers", XIONG,
      P("ratio", (at("pre"),), GROW_RATIO, "above", measure="act_ratio"), lr="fixed"),
), mode="init_probe", plots=("init_grid.png", "grad_norm_init.png", "act_norm_init.png"))

WARM, COLD = {"lr": REF_LR, "warmup_steps": MAX}, {"lr": REF_LR, "warmup_steps": 0}
F2 = Finding("f2_warmup", "F2: Post-LN needs learning-rate warmup, Pre-LN does not", (
    C("F2a", "Post-LN without warmup ends worse than with it", XIONG,
      P("pairs", ({"placement": "post", **COLD}, {"placement": "post", **WARM}), MOST, "above",
        by=WORSE, name="seeds where Post-LN without warmup ends worse (stalls, or >= 0.10)"),
      seeds=12, lr="fixed", departs=SHORT),
    C("F2b", "Pre-LN without warmup ends as well as with it", XIONG,
      P("paired", ({"placement": "pre", **COLD}, {"placement": "pre", **WARM}), CLOSE, "below"),
      lr="fixed", departs=SHORT),
))

F3 = Finding("f3_depth", "F3: depth stability of Post-LN, Pre-LN and DeepNorm; F4: shallow "
             "Post-LN ends better", (
    worse_at_depth("F3a", "Post-LN ends far worse than Pre-LN and DeepNorm at the deepest depth",
                   "post", "pre", "deepnorm"),
    C("F3b", "Pre-LN and DeepNorm train at every depth", WANG,
      P("diff", (at("pre"), at("pre", MIN)), DEEP_OK, "below"),
      P("diff", (at("deepnorm"), at("deepnorm", MIN)), DEEP_OK, "below")),
    C("F3c", "Post-LN's model update is larger early in training than DeepNorm's", WANG,
      P("ratio2", (at("post", lr=RUN_LR), at("deepnorm", lr=RUN_LR)), UPDATE_RATIO, "above",
        measure="early_update"), lr="fixed"),
    C("F4", "Shallow Post-LN with warmup ends at least as well as Pre-LN", LIU,
      P("diff", (at("post", MIN), at("pre", MIN)), F4_TOL, "below")),
), plots=("lr_sensitivity.png", "best_val_vs_depth.png", "model_update.png"))

UPDATE = {"lr": RUN_LR, "warmup_steps": MAX}  # V3's arm: with warmup, at the run's rate
VIT = Finding("vit_depth", "ViT on digits: depth stability without warmup, each arm at its "
              "stable best learning rate", (
    C("V1", "Post-LN ends worse than Pre-LN and DeepNorm at the deepest depth", LIU,
      P("ratio2", (cold("post"), cold("pre")), FACTOR, "above"),
      P("ratio2", (cold("post"), cold("deepnorm")), FACTOR, "above"), seeds=9),
    C("V2", "Pre-LN and DeepNorm train at every depth", WANG,
      P("ratio2", (cold("pre"), cold("pre", MIN)), FACTOR, "below"),
      P("ratio2", (cold("deepnorm"), cold("deepnorm", MIN)), FACTOR, "below"), seeds=7),
    C("V3", "Post-LN's model update is larger early in training than DeepNorm's", WANG,
      P("ratio2", (at("post", **UPDATE), at("deepnorm", **UPDATE)), UPDATE_RATIO, "above",
        measure="early_update"), lr="fixed"),
), plots=("lr_sensitivity.png", "best_val_vs_depth.png", "model_update.png"))

RMS, LN = {"placement": EACH, "norm": "rmsnorm"}, {"placement": EACH, "norm": "layernorm"}
F5 = Finding("f5_norms", "F5: RMSNorm matches LayerNorm", (
    C("F5", "RMSNorm trains as LayerNorm does and matches its best val loss",
      "Zhang & Sennrich 2019",
      P("rate", (RMS,), MOST, "above", event="trained"),
      P("diff", (RMS, LN), CLOSE, "within", among="trained"),
      seeds=12, departs=SHORT),
), plots=("lr_sensitivity.png", "loss_curves.png"))


def by_batch(norm: str) -> tuple[dict, dict]:
    return {"norm": norm, BATCH: MIN}, {"norm": norm, BATCH: MAX}


F7 = Finding("f7_batch_stats", "F7: BatchNorm depends on the batch size; LayerNorm and RMSNorm "
             "do not", (
    C("F7a", "BatchNorm's val loss rises at a small batch more than LayerNorm's and RMSNorm's "
      "(accuracy sits at its ceiling, ~0.97)", "Ioffe & Szegedy 2015; Wu & He 2018",
      *(P("contrast", (*by_batch("batchnorm"), *by_batch(n)), ACC_FACTOR, "above",
          weights=(1, -1, -1, 1), log=True, name=f"batchnorm's loss factor small/large / {n}'s")
        for n in ("layernorm", "rmsnorm")), seeds=10, lr="fixed"),
    C("F7b", "LayerNorm's and RMSNorm's val loss do not depend on the batch size",
      "Ba et al. 2016; Zhang & Sennrich 2019",
      *(P("ratio2", by_batch(n), m, side) for n in ("layernorm", "rmsnorm")
        for m, side in ((1 / ACC_FACTOR, "above"), (ACC_FACTOR, "below"))), seeds=10, lr="fixed"),
), plots=("loss_curves.png", "acc_vs_batch.png"),
   figures=(Figure("acc_vs_batch.png", "data.batch_size", ("best_val_acc",)),))

LEAGUE = Finding("placements_depth", "The placements league: every placement 12 layers deep, "
                 "each at its stable best learning rate", (
    worse_at_depth("P1", "Post-LN ends far worse than Pre-LN and DeepNorm at depth",
                   "post", "pre", "deepnorm"),
    trains("P2", "pre", XIONG),
    trains("P3", "deepnorm", WANG, seeds=12),
    trains("P4", "sandwich", "Ding et al. 2021; Kim et al. 2025"),
    trains("P5", "admin", LIU),
    trains("P6", "rezero", "Bachlechner et al. 2020",
           "ReZero trains at depth at the best rate where its grid seeds all trained", seeds=12),
    trains("P7", "ngpt", "Loshchilov et al. 2024", "nGPT (rotary positions and an untied head, "
           "as its paper) trains at depth (12 layers)", arm=at("ngpt", **{"model.pos": "rope"})),
), plots=("lr_sensitivity.png", "loss_curves.png"))

F11 = Finding("f11_admin", "F11: Admin trains deep Post-LN stacks where plain Post-LN stalls (24 "
              "layers, 150 warmup steps of 600, each arm at its stable best learning rate)", (
    worse_at_depth("F11a", "Post-LN ends far worse than Pre-LN at the deepest depth",
                   "post", "pre"),
    worse_at_depth("F11b", "Admin ends far better than Post-LN at that depth", "post", "admin"),
    C("F11c", "Admin ends at least as well as Pre-LN at every depth", LIU,
      P("diff", (at("admin", EACH), at("pre", EACH)), CLOSE, "below")),
), plots=("lr_sensitivity.png", "loss_curves.png"))

NO_QK, WITH_QK = {QK: False, Z: 0.0}, {QK: True, Z: 0.0}
F6 = Finding("f6_lr_sensitivity", "F6: attention logits at high learning rates, and QK-norm", (
    C("F6a", "Without QK-norm the max attention logit grows with the learning rate", WORTSMAN,
      P("ratio2", ({**NO_QK, "lr": MAX}, {**NO_QK, "lr": MIN}), LOGIT_GROWTH**0.5, "above",
        measure="peak_logit", per_decade=True), lr="curve"),
    C("F6b", "With QK-norm the max attention logit stays bounded", WORTSMAN,
      P("ratio2", ({**WITH_QK, "lr": MAX}, {**WITH_QK, "lr": MIN}), LOGIT_GROWTH**0.5, "below",
        measure="peak_logit", per_decade=True),
      P("ratio2", ({**NO_QK, "lr": MAX}, {**WITH_QK, "lr": MAX}), LOGIT_GROWTH, "above",
        measure="peak_logit"), lr="curve"),
    C("F6c", "At the highest learning rates QK-norm ends with a lower loss", WORTSMAN,
      P("diff", ({**NO_QK, "lr": EACH}, {**WITH_QK, "lr": EACH}), WORSE, "above",
        measure="final_val_loss", top=2), lr="curve"),
), plots=("lr_sensitivity.png", "lr_sweep.png", "loss_curves.png"),
   figures=(Figure("lr_sweep.png", "optim.lr", ("max:attn/max_logit", "final_val_loss")),))

PRE, PERI = {"placement": "pre"}, {"placement": "sandwich"}
F8 = Finding("f8_residual", "F8: the residual stream of Pre-LN grows with depth and training; "
             "Peri-LN's grows more slowly", (
    C("F8a", "In Pre-LN the residual stream's RMS grows with depth", KIM,
      P("ratio", (PRE,), GROWS, "above", measure="act_depth_ratio"), lr="fixed"),
    C("F8b", "In Pre-LN the residual stream's RMS and largest values grow in training", KIM,
      P("ratio", (PRE,), GROWS, "above", measure="rms_growth"),
      P("ratio", (PRE,), GROWS, "above", measure="max_growth"), lr="fixed"),
    C("F8c", "Peri-LN's (sandwich's) last-layer RMS grows in training more slowly than Pre-LN's",
      KIM, P("ratio2", (PRE, PERI), GROWS, "above", measure="rms_growth"), lr="fixed"),
), plots=("heat_act_norm.png", "heat_act_max.png", "loss_curves.png"))

LATE = P("ratio", (at("pre"),), RMS_GROWTH, "above", measure="rms_late_growth")
F9 = Finding("f9_depth_curse", "F9: the curse of depth in Pre-LN, and LayerNorm Scaling", (
    C("F9a", "Pre-LN's residual stream RMS still grows in the later half", SUN, LATE),
    C("F9b", "Pre-LN's later blocks barely change their input (cosine near 1)", SUN,
      P("mean", (at("pre"),), NEAR_ONE, "above", measure="cos_late")),
    C("F9c", "LayerNorm Scaling lowers the later half's cosine", SUN,
      P("diff", (at("pre"), at("lns")), COS_DROP, "above", measure="cos_late"),
      gate=Gate("no depth-wise variance growth in Pre-LN for LNS to damp", LATE),
      departs="24 layers of width 64 for 200 steps; the paper's models are 130M-7B LLMs"),
    C("F9d", "LayerNorm Scaling ends no worse than Pre-LN", SUN,
      P("diff", (at("lns"), at("pre")), CLOSE, "below")),
), plots=("block_profile.png", "heat_block_cos.png", "loss_curves.png"), draws=(plot_profiles,))

F10 = Finding("f10_entropy", "F10: attention entropy collapse at high rates, and QK-norm", (
    C("F10a", "Without QK-norm attention entropy collapses (to near 0) at high learning rates",
      ZHAI,
      P("mean", ({QK: False, "lr": MAX},), FLOOR, "below", measure="min_entropy"),
      P("mean", ({QK: False, "lr": MIN},), FLOOR, "above", measure="min_entropy"), lr="curve"),
    C("F10b", "QK-norm prevents the entropy collapse: no QK-norm run's entropy falls to 0.1 "
      "nats at any swept rate", "Dehghani et al. 2023 (QK-layernorm against near-one-hot "
      "attention); Zhai et al. 2023 propose sigmaReparam instead",
      P("every", ({QK: True, "lr": EACH},), FLOOR, "above", measure="min_entropy"), lr="curve"),
    C("F10c", "The runs whose entropy collapsed are the unstable ones: without QK-norm, runs "
      "whose entropy fell to 0.1 nats diverge or stall more often than the others", ZHAI,
      P("split", ({QK: False},), 0.0, "above", where=("min_entropy", "below", FLOOR)),
      lr="curve"),
), plots=("heat_attn_entropy_min.png", "entropy_vs_lr.png", "sharpness.png"),
   figures=(Figure("entropy_vs_lr.png", "optim.lr",
                   ("min_attn_entropy", "max:attn/max_logit", "best_val_loss")),))

LONG = Gate("the paper's output-logit divergence comes late in runs of ~1e5 steps (the pilot: "
            "log Z fell at most 0.02 nats after warmup in 1000 steps)", setting=("max_steps",
            LONG_RUN))
F12 = Finding("f12_z_loss", "F12: output logit drift (log Z) at high learning rates, and z-loss", (
    C("F12a", "Without z-loss log Z diverges (falls far below 0) at high learning rates",
      WORTSMAN,
      P("mean", ({Z: 0.0, "lr": MAX},), DRIFT, "above", measure="log_z_fall"),
      P("mean", ({Z: 0.0, "lr": MAX},), 0.0, "below", measure="log_z_min"),
      lr="curve", gate=LONG),
    C("F12b", "z-loss 1e-4 keeps |log Z| small at a high learning rate", WORTSMAN,
      P("ratio2", ({Z: MAX, "lr": MAX}, {Z: 0.0, "lr": MAX}), 0.5, "below",
        measure="final_abs_log_z"), lr="curve", gate=LONG),
    C("F12c", "z-loss 1e-4 costs no final loss", WORTSMAN,
      P("paired", ({Z: MAX, "lr": REF_LR}, {Z: 0.0, "lr": REF_LR}), CLOSE, "below"), lr="fixed",
      gate=Gate("uninformative: z-loss moved |log Z| by less than 1 nat (inert)",
                P("paired", ({Z: 0.0, "lr": REF_LR}, {Z: MAX, "lr": REF_LR}), DRIFT, "above",
                  measure="final_abs_log_z"))),
), plots=("log_z.png", "log_z_vs_lr.png", "loss_curves.png"),
   figures=(Figure("log_z_vs_lr.png", "optim.lr", ("last:logits/log_z", "best_val_loss")),))

BOTH, LOSS = {QK: True, Z: MAX}, "final_val_loss"
F13 = Finding("f6_lr_sensitivity", "F13: final loss against the learning rate with qk-layernorm "
              "and z-loss (Wortsman et al. 2023, Figure 1)", (
    C("F13a", "qk-layernorm lowers the LR sensitivity while the best loss stays", WORTSMAN,
      P("curve", (NO_QK, WITH_QK), SENS_GAP, "above", measure=LOSS),
      P("curve", (WITH_QK, NO_QK), CLOSE, "below", stat="best", measure=LOSS), lr="curve"),
    C("F13b", "With qk-layernorm on, z-loss lowers the LR sensitivity while the best loss "
      "stays", WORTSMAN,
      P("curve", (WITH_QK, BOTH), SENS_GAP, "above", measure=LOSS),
      P("curve", (BOTH, WITH_QK), CLOSE, "below", stat="best", measure=LOSS), lr="curve",
      gate=Gate("no log Z divergence without z-loss for z-loss to act on",
                P("mean", ({**WITH_QK, "lr": MAX},), DRIFT, "above", measure="log_z_fall"))),
    C("F13c", "With qk-layernorm and z-loss the loss stays within 0.1 nats of its best up to "
      "10x above its best rate, further than without both", WORTSMAN,
      P("curve_level", (BOTH,), SPAN_UP, "above", stat="span_up", measure=LOSS),
      P("curve_ratio", (BOTH, NO_QK), 1.0, "above", stat="span_up", measure=LOSS), lr="curve",
      departs="the paper's flat curve also has longer warmup, independent decay and muParam, "
              "not tested here"),
), plots=("lr_sensitivity.png", "loss_curves.png"))

def pre(norm: str) -> dict:
    return {"placement": "pre", "norm": norm}


# DyT with one a (0.5, its module default) and with the attention input's apart (Zhu et al.'s
# LLaMA 7B init: 0.8 before attention, 0.2 elsewhere)
GAIN = {"model.emb_gain": True}  # DyT and Derf as their authors' language models run
DYT = {**pre("dyt"), "norm.alpha": 0.5, "norm.alpha_attn": None, **GAIN}
DYT_APART = {**pre("dyt"), "norm.alpha": 0.2, "norm.alpha_attn": 0.8, **GAIN}
DERF = {**pre("derf"), **GAIN}
F17 = Finding("f17_norm_free", "F17: the norm-free and norm-like layers of 2025 against "
              "LayerNorm and RMSNorm", (
    C("F17a", "Derf ends below LayerNorm", "Chen et al. 2025",
      P("diff", (DERF, pre("layernorm")), 0.0, "below"), departs=SHORT),
    C("F17b", "Derf ends below DyT", "Chen et al. 2025",
      P("diff", (DERF, DYT), 0.0, "below"), departs=SHORT),
    C("F17c", "SeeDNorm ends below RMSNorm", "Cai et al. 2025",
      P("diff", (pre("seednorm"), pre("rmsnorm")), 0.0, "below"), departs=SHORT),
    C("F17d", "DyT matches LayerNorm", "Zhu et al. 2025",
      P("diff", (DYT, pre("layernorm")), CLOSE, "within"), departs=SHORT),
    C("F17e", "DyT with the attention input's a apart (0.8 there, 0.2 elsewhere) matches "
      "LayerNorm", "Zhu et al. 2025 (their LLaMA 7B init)",
      P("diff", (DYT_APART, pre("layernorm")), CLOSE, "within"),
      departs=SHORT + "; the init was tuned at 7B"),
), plots=("lr_sensitivity.png", "loss_curves.png"))

CAP, CLIP, GATE = "model.attn_softcap", "model.qk_clip", "model.attn_gate"
# F16's arms: the unprotected baseline, and each control changing one thing of it
UNPROTECTED = {QK: False, CAP: None, CLIP: None, "model.sigma_reparam": False, GATE: None,
               "optim.name": "adamw"}
CONTROL = lambda **one: {**UNPROTECTED, **one}  # noqa: E731
QKNORM, SOFTCAP = CONTROL(**{QK: True}), CONTROL(**{CAP: 50.0})
QKCAP = CONTROL(**{QK: True, CAP: 50.0})
SIGMA_ARM, GATED = CONTROL(**{"model.sigma_reparam": True}), CONTROL(**{GATE: "headwise"})
MUON, KIMI_TAU = CONTROL(**{"optim.name": "muon"}), 100.0
CLIPPED = CONTROL(**{"optim.name": "muon", CLIP: KIMI_TAU})
F16 = Finding("f16_logit_controls", "F16: the logit-control league at each control's own rates", (
    C("F16a", "QK-norm with soft-capping keeps its loss within 0.1 nats of its best up to 1.5x "
      "further above its best rate than QK-norm alone", "Rybakov et al. 2024",
      P("curve_ratio", (QKCAP, QKNORM), 1.5, "above", stat="span_up", measure=LOSS),
      lr="curve", departs="the paper's stable rate (no divergence) read as the span of rates "
              "within 0.1 nats of the best; " + SHORT),
    C("F16b", "QK-clip holds the largest attention logit near tau (100) at the top rate",
      "Kimi Team 2025", P("mean", ({**CLIPPED, "lr": MAX},), 1.5 * KIMI_TAU, "below",
                          measure="peak_logit"), lr="curve",
      gate=Gate("the logits stay under tau without QK-clip: nothing for it to clip",
                P("mean", ({**MUON, "lr": MAX},), KIMI_TAU, "above", measure="peak_logit")),
      departs=SHORT),
    C("F16c", "QK-clip costs no loss: its best loss is within 0.05 nats of Muon's without it",
      "Kimi Team 2025", P("curve", (CLIPPED, MUON), CLOSE, "below", stat="best", measure=LOSS),
      lr="curve", departs=SHORT),
    C("F16d", "Each logit control lowers the LR sensitivity of the unprotected model",
      "Wortsman et al. 2023; Rybakov et al. 2024; Zhai et al. 2023; Qiu et al. 2025",
      *(P("curve", (UNPROTECTED, arm), SENS_GAP, "above", measure=LOSS)
        for arm in (QKNORM, QKCAP, SOFTCAP, SIGMA_ARM, GATED)), lr="curve", departs=SHORT),
    C("F16e", "Gated attention keeps its loss within 0.1 nats of its best further above its "
      "best rate than the unprotected model", "Qiu et al. 2025",
      P("curve_ratio", (GATED, UNPROTECTED), 1.0, "above", stat="span_up", measure=LOSS),
      lr="curve", departs=SHORT),
), plots=("lr_sensitivity.png", "lr_sweep.png", "loss_curves.png"),
   figures=(Figure("lr_sweep.png", "optim.lr", ("max:attn/max_logit", "final_val_loss")),))

ZHU, XIE = "Zhu et al. 2025", "Xie et al. 2025"
LEAGUE_SIZE = ("200 steps of a 12-layer d=64 GPT; the papers' gains are a few hundredths of a nat "
               "at 1B parameters and more")
PLAIN_SUM = at("pre", **{"model.connection": "residual", "model.attn_gate": None})
TOPOLOGY = lambda **one: {**PLAIN_SUM, **one}  # noqa: E731
HC4 = TOPOLOGY(**{"model.connection": "hc", "model.streams": 4, "model.fracs": 1})
MHC4 = TOPOLOGY(**{"model.connection": "mhc", "model.streams": 4})
FRAC2 = TOPOLOGY(**{"model.connection": "hc", "model.streams": 1, "model.fracs": 2})
GATED12 = TOPOLOGY(**{"model.attn_gate": "headwise"})
F19 = Finding("f19_topologies", "F19: residual topologies and gated attention at the league's "
              "depth, each at its stable best learning rate", (
    C("F19a", "Hyper-connections (4 streams) end below Pre-LN's plain residual sum", ZHU,
      P("diff", (HC4, PLAIN_SUM), 0.0, "below"), departs=LEAGUE_SIZE),
    C("F19b", "Manifold-constrained hyper-connections end below Pre-LN's plain sum", XIE,
      P("diff", (MHC4, PLAIN_SUM), 0.0, "below"), departs=LEAGUE_SIZE),
    C("F19c", "Manifold-constrained hyper-connections end at least as well as hyper-connections",
      XIE, P("diff", (MHC4, HC4), CLOSE, "below"), departs=LEAGUE_SIZE),
    C("F19d", "Frac-connections (2 fractions) end below Pre-LN's plain sum",
      "Zhu et al. 2025b", P("diff", (FRAC2, PLAIN_SUM), 0.0, "below"), departs=LEAGUE_SIZE),
    C("F19e", "Head-wise gated attention ends below Pre-LN without it", "Qiu et al. 2025",
      P("diff", (GATED12, PLAIN_SUM), 0.0, "below"), departs=LEAGUE_SIZE),
), plots=("lr_sensitivity.png", "loss_curves.png"))

STEPS, SHORT_RUN, LONG_RUN_STEPS = "max_steps", 200, 3200
F20 = Finding("f20_dyt_budget", "F20: DyT against LayerNorm as the token budget grows", (
    C("F20a", "DyT's loss relative to LayerNorm's worsens as the token budget grows 16x",
      "Verma 2026", P("contrast", ({**DYT, STEPS: LONG_RUN_STEPS}, {**pre("layernorm"),
                                   STEPS: LONG_RUN_STEPS}, {**DYT, STEPS: SHORT_RUN},
                                   {**pre("layernorm"), STEPS: SHORT_RUN}), 0.0, "above",
                      weights=(1, -1, -1, 1)), lr="fixed",
      departs="0.2M and 3.3M tokens for a 0.4M-parameter GPT (0.5 and 8 tokens a parameter): "
              "the paper's 64M model saw 1M and 118M (0.016 and 1.8), a regime whose tokens "
              "per parameter leave a model this small at the unigram plateau"),
    C("F20b", "DyT's share of saturated units grows with the token budget", "Verma 2026",
      P("ratio2", ({**DYT, STEPS: LONG_RUN_STEPS}, {**DYT, STEPS: SHORT_RUN}), 1.0, "above",
        measure="norm_saturation"), lr="fixed", departs=SHORT),
), plots=("loss_curves.png",))

SIGMA = "model.sigma_reparam"
PLAIN_HI, SIGMA_HI = {QK: False, SIGMA: False, "lr": MAX}, {QK: False, SIGMA: True, "lr": MAX}
COLLAPSES = Gate("no entropy collapse at the top rate without sigmaReparam for it to prevent",
                 P("mean", (PLAIN_HI,), FLOOR, "below", measure="min_entropy"))
F15 = Finding("f15_sigma_reparam", "F15: sigmaReparam against attention entropy collapse", (
    C("F15a", "sigmaReparam keeps attention entropy above 0.1 nats at every swept rate, where "
      "it collapses without", ZHAI,
      P("every", ({QK: False, SIGMA: True, "lr": EACH},), FLOOR, "above", measure="min_entropy"),
      lr="curve", gate=COLLAPSES, departs=SHORT, seeds=10),
    C("F15b", "At lr 0.3, where the plain runs turn unstable, sigmaReparam's runs diverge or "
      "stall less often than the plain runs", ZHAI,
      P("rate2", ({QK: False, SIGMA: False, "lr": 0.3}, {QK: False, SIGMA: True, "lr": 0.3}),
        0.0, "above", event="not_trained"),
      lr="fixed", gate=COLLAPSES, seeds=12, departs=SHORT),
), plots=("heat_attn_entropy_min.png", "entropy_vs_lr.png", "lr_sensitivity.png"),
   figures=F10.figures)

YANG, DEY = "Yang et al. 2022", "Dey et al. 2025"
TINY = "widths 32-128 and depths 2-8 for 300 steps; the papers' models reach 1-10B parameters"


def size(param: str, placement: str = "pre", **shape: int) -> dict:
    """An F14 arm: one parametrization and placement at one shape, its lr curve as one arm."""
    return {"param": param, "placement": placement, **shape}


def stays(cid: str, statement: str, source: str, small: dict, large: dict, seeds: int = SEEDS):
    """F14's "the best lr transfers": the optimum moves less than BAND decades."""
    return C(cid, statement, source, P("curve", (small, large), BAND, "within",
             stat="log_best_lr", measure=LOSS), lr="curve", departs=TINY, seeds=seeds)  # fmt: skip


SHALLOW, DEEP = {"n_embd": 32, "n_layer": 2}, {"n_embd": 32, "n_layer": 8}
F14 = Finding("f14_transfer", "F14: does the best learning rate transfer across width (muP) and "
              "depth (CompleteP), and which placements keep it", (
    C("F14a", "Under SP the best learning rate falls as the model widens 4x", YANG,
      P("curve", (size("sp", n_embd=32, n_layer=2), size("sp", n_embd=128, n_layer=2)), SHIFT,
        "above", stat="log_best_lr", measure=LOSS), lr="curve", departs=TINY),
    stays("F14b", "Under muP the best learning rate stays as the model widens 4x", YANG,
          size("mup", n_embd=32, n_layer=2), size("mup", n_embd=128, n_layer=2)),
    stays("F14c", "Under CompleteP Pre-LN's best learning rate stays as it deepens 4x", DEY,
          size("completep", **SHALLOW), size("completep", **DEEP), seeds=10),
    *(stays(f"F14d-{p}", f"Under CompleteP {name}'s best learning rate stays as it deepens 4x",
            f"{DEY} (reported for Pre-LN only)", size("completep", p, **SHALLOW),
            size("completep", p, **DEEP), seeds=n)
      for p, name, n in (("post", "Post-LN", 10), ("sandwich", "Peri-LN", 10),
                         ("deepnorm", "DeepNorm", 5), ("lns", "LNS", 10), ("mix", "Mix-LN", 10))),
    C("F14e", "Under SP Pre-LN's best learning rate moves as it deepens 4x", DEY,
      P("curve", (size("sp", **SHALLOW), size("sp", **DEEP)), SHIFT, "above", stat="log_best_lr",
        measure=LOSS), lr="curve", departs=TINY),
), plots=("lr_transfer.png", "lr_sensitivity.png", "loss_curves.png"))

GU, HE, MARIN = "Gu et al. 2025", "He et al. 2024", "Marin's 32B run (2025)"
# Pre-LN with AdamW, no guard, fp32, plain embeddings: each arm changes one of these
PLAIN = {"optim.name": "adamw", "optim.guards": [], "model.emb_norm": False,
         "model.sim_dtype": None}
PRE_LO, PRE_HI = at("pre", lr=MIN, **PLAIN), at("pre", lr=MAX, **PLAIN)
PERI_HI = at("sandwich", lr=MAX, **PLAIN)
ARM = lambda **one: {**PRE_HI, **one}  # noqa: E731  (Pre-LN at the high rate, one change)
FP16 = {"model.sim_dtype": "fp16"}
F18 = Finding("f18_instruments", "F18: what the instruments of 2024-26 show at the league's size", (
    C("F18a", "In Pre-LN attention sinks emerge at a high learning rate: at least one head in ten "
      "puts over 0.3 of its attention on the first token, more than at the league's rate", GU,
      P("mean", (PRE_HI,), SINKS, "above", measure="sink_share"),
      P("diff", (PRE_HI, PRE_LO), 0.0, "above", measure="sink_share"), lr="fixed",
      departs=SIZE18, seeds=10),
    C("F18b", "Massive activations emerge in Pre-LN: the top |h| sits 100x above the median",
      "Sun et al. 2024", P("ratio", (PRE_HI,), MASSIVE, "above", measure="massive_ratio"),
      lr="fixed", departs=SIZE18),
    C("F18c", "Outlier features grow in Pre-LN's training at a high learning rate: the neurons' "
      "kurtosis at least doubles, and grows more than at the league's rate", HE,
      P("ratio", (PRE_HI,), GROWS, "above", measure="kurtosis_growth"),
      P("ratio2", (PRE_HI, PRE_LO), 1.0, "above", measure="kurtosis_growth"), lr="fixed",
      departs=SIZE18, seeds=6),
    C("F18d", "At a high rate Pre-LN's Adam update norm spikes before its loss does", MARIN,
      P("mean", (PRE_HI,), 0.0, "above", measure="update_lead"), lr="fixed",
      gate=Gate("no 6-sigma loss spike for an update spike to precede",
                P("mean", (PRE_HI,), 0.5, "above", measure="sigma_spikes")), departs=SIZE18),
    C("F18e", "In an fp16 forward Pre-LN diverges at a high rate more often than Peri-LN",
      "Kim et al. 2025",
      P("rate2", (ARM(**FP16), {**PERI_HI, **FP16}), 0.0, "above", event="diverged"),
      lr="fixed", seeds=RATE_SEEDS,
      gate=Gate("Pre-LN's activations stay inside fp16's range in fp32",
                P("mean", (PRE_HI,), 0.0, "below", measure="min_fp16_headroom"))),
    C("F18f", "At a high rate Pre-LN with scaled and normalized embeddings ends better",
      "Takase et al. 2023", P("paired", (PRE_HI, ARM(**{"model.emb_norm": True})), F4_TOL,
                              "above"), lr="fixed"),
    C("F18g", "Adam-atan2 ends as well as AdamW at a high rate", "Everett et al. 2024",
      P("paired", (ARM(**{"optim.name": "adam_atan2"}), PRE_HI), CLOSE, "below"), lr="fixed",
      seeds=10),
    C("F18h", "Skipping 6-sigma steps costs no final loss at a high rate", "OLMo-core's skip step",
      P("paired", (ARM(**{"optim.guards": ["skip_step"]}), PRE_HI), CLOSE, "below"),
      lr="fixed", gate=Gate("uninformative: the guard skipped no step",
                            P("mean", (ARM(**{"optim.guards": ["skip_step"]}),), 0.5, "above",
                              measure="skipped_steps"))),
    C("F18i", "Clipping 3-sigma updates costs no final loss at a high rate",
      "Levanter's update clipping",
      P("paired", (ARM(**{"optim.guards": ["clip_update"]}), PRE_HI), CLOSE, "below"),
      lr="fixed", gate=Gate("uninformative: the guard clipped no update",
                            P("mean", (ARM(**{"optim.guards": ["clip_update"]}),), 0.5, "above",
                              measure="clipped_updates"))),
), plots=("heat_attn_sink.png", "heat_act_massive.png", "heat_act_kurtosis.png",
          "heat_adam_update.png", "loss_curves.png"))
# fmt: on

FINDINGS: dict[str, Finding] = {
    "f1": F1, "f2": F2, "f3": F3, "f5": F5, "vit": VIT, "f6": F6, "f7": F7, "placements": LEAGUE,
    "f8": F8, "f9": F9, "f10": F10, "f11": F11, "f12": F12, "f13": F13, "f18": F18, "f14": F14,
    "f15": F15, "f16": F16, "f17": F17, "f19": F19, "f20": F20,
}  # fmt: skip
ALIASES = {"f4": "f3"}  # F4 is the shallow arm of the depth sweep
