"""Every finding and its claims, declared (analysis/findings/declare.py says what the fields
mean, judge.py how they are decided). A change to a claim here changes its hash: a claim
changed after its confirmatory run is exploratory again, and the change goes into its finding's
ledger (docs/findings/<id>/README.md) with the verdict before and after on the same data.

The words the claims are declared in (margins, sources, seeds per arm, the helpers that build
claims and arms) are analysis/findings/vocabulary.py's; the findings of the 2025-26 round
(F14-F17, F19, F20) are declared in analysis/findings/frontier.py and listed here with the rest.
"""

from __future__ import annotations

from analysis.block_profile import plot_profiles
from analysis.findings.declare import EACH, MAX, MIN, REF_LR, RUN_LR, Figure, Finding, Gate
from analysis.findings.declare import Part as P
from analysis.findings.frontier import (
    F13MU,
    F14,
    F14EMB,
    F15,
    F16,
    F17,
    F19,
    F19MHC,
    F20,
    F21,
)
from analysis.findings.vocabulary import (
    ACC_FACTOR,
    BATCH,
    CLOSE,
    COS_DROP,
    DEEP_OK,
    DRIFT,
    ENTROPY_FIGURES,
    F4_TOL,
    FACTOR,
    FLAT_RATIO,
    FLAT_SLOPE,
    FLOOR,
    GROW_RATIO,
    GROWS,
    KIM,
    LIU,
    LOGIT_GROWTH,
    LONG_RUN,
    LOSS,
    MASSIVE,
    MOST,
    NEAR_ONE,
    QK,
    RATE_SEEDS,
    RMS_GROWTH,
    SENS_GAP,
    SHORT,
    SHRINK_SLOPE,
    SINKS,
    SIZE18,
    SPAN_UP,
    SUN,
    SUN_RATIO,
    UPDATE_RATIO,
    WANG,
    WORSE,
    WORTSMAN,
    XIONG,
    ZHAI,
    C,
    Z,
    at,
    cold,
    trains,
    worse_at_depth,
)

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
   figures=ENTROPY_FIGURES)

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

BOTH = {QK: True, Z: MAX}
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


GU, HE, MARIN = "Gu et al. 2025", "He et al. 2024", "Marin's 32B run (2025)"
# Pre-LN with AdamW, no guard, fp32, plain embeddings: each arm changes one of these
PLAIN = {"optim.name": "adamw", "optim.guards": [], "model.emb_norm": False,
         "model.sim_dtype": None}
PRE_LO, PRE_HI = at("pre", lr=MIN, **PLAIN), at("pre", lr=MAX, **PLAIN)
PERI_HI = at("sandwich", lr=MAX, **PLAIN)
ARM = lambda **one: {**PRE_HI, **one}  # noqa: E731  (Pre-LN at the high rate, one change)
FP16 = {"model.sim_dtype": "fp16"}
SKIP, CLIP = ARM(**{"optim.guards": ["skip_step"]}), ARM(**{"optim.guards": ["clip_update"]})
F18 = Finding("f18_instruments", "F18: what the instruments of 2024-26 show at the league's size", (
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
), plots=("heat_attn_sink.png", "heat_act_massive.png", "heat_act_kurtosis.png",
          "heat_adam_update.png", "loss_curves.png"))

# F18a, b, h and i re-declared on the instruments as their sources compute them (2026-12-08):
# the sink share thresholded per sample (Gu et al.), massive activations by Sun et al.'s two
# thresholds, skip-step scoring the gradient norm before clipping (OLMo-core), update clipping
# before the learning rate (Levanter); F18's old verdicts on them stay in its retired list
F18SRC = Finding("f18_sources", "F18's instrument claims, measured as their sources measure", (
    C("F18a", "In Pre-LN attention sinks emerge at a high learning rate: in at least one "
      "(sample, head) pair in ten the head puts over 0.3 of its attention on the first token, "
      "more than at the league's rate", GU,
      P("mean", (PRE_HI,), SINKS, "above", measure="sink_share"),
      P("diff", (PRE_HI, PRE_LO), 0.0, "above", measure="sink_share"), lr="fixed",
      departs=SIZE18, seeds=10),
    C("F18b", "Massive activations as Sun et al. define them emerge in Pre-LN at a high rate: "
      "the top |h| exceeds 100 and sits over 1000x above the median", "Sun et al. 2024",
      P("ratio", (PRE_HI,), MASSIVE, "above", measure="massive_abs"),
      P("ratio", (PRE_HI,), SUN_RATIO, "above", measure="massive_ratio"),
      lr="fixed", departs=SIZE18, seeds=10),
    C("F18h", "Skipping steps whose loss or pre-clip gradient norm lies 6 sigma out costs no "
      "final loss at a high rate", "OLMo-core's skip step",
      P("paired", (SKIP, PRE_HI), CLOSE, "below"), lr="fixed", seeds=10,
      gate=Gate("uninformative: the guard skipped no step",
                P("mean", (SKIP,), 0.5, "above", measure="skipped_steps"))),
    C("F18i", "Clipping updates, before the learning rate, to 3 sigma above their recent mean "
      "costs no final loss at a high rate", "Levanter's update clipping",
      P("paired", (CLIP, PRE_HI), CLOSE, "below"), lr="fixed", seeds=10,
      gate=Gate("uninformative: the guard clipped no update",
                P("mean", (CLIP,), 0.5, "above", measure="clipped_updates"))),
), plots=("heat_attn_sink.png", "heat_act_massive.png", "loss_curves.png"))
# fmt: on

FINDINGS: dict[str, Finding] = {
    "f1": F1, "f2": F2, "f3": F3, "f5": F5, "vit": VIT, "f6": F6, "f7": F7, "placements": LEAGUE,
    "f8": F8, "f9": F9, "f10": F10, "f11": F11, "f12": F12, "f13": F13, "f18": F18, "f14": F14,
    "f15": F15, "f16": F16, "f17": F17, "f19": F19, "f20": F20, "f13mu": F13MU,
    "f19mhc": F19MHC, "f18src": F18SRC, "f21": F21, "f14emb": F14EMB,
}  # fmt: skip
ALIASES = {"f4": "f3"}  # F4 is the shallow arm of the depth sweep
