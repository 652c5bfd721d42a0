"""The findings of the 2025-26 round (F14-F17, F19, F20, F13 with muParam), declared in the
registry's words (analysis/findings/vocabulary.py); analysis/findings/registry.py lists them with
the rest."""

from __future__ import annotations

from analysis.findings.declare import EACH, MAX, Figure, Finding, Gate
from analysis.findings.declare import Part as P
from analysis.findings.vocabulary import (
    BAND,
    CLOSE,
    ENTROPY_FIGURES,
    FLOOR,
    LOSS,
    QK,
    SEEDS,
    SENS_GAP,
    SHIFT,
    SHORT,
    SPAN_UP,
    WORTSMAN,
    ZHAI,
    C,
    at,
    pre,
)

# fmt: off
# DyT with one a (0.5, its module default) and with the attention input's apart (Zhu et al.'s
# LLaMA 7B init: 0.8 before attention, 0.2 elsewhere)
GAIN = {"model.emb_gain": True}  # DyT and Derf as their authors' language models run
DYT = {**pre("dyt"), "norm.alpha": 0.5, "norm.alpha_attn": None, **GAIN}
DYT_APART = {**pre("dyt"), "norm.alpha": 0.2, "norm.alpha_attn": 0.8, **GAIN}
DERF = {**pre("derf"), **GAIN}
F17 = Finding("f17_norm_free", "F17: the norm-free and norm-like layers of 2025 against "
              "LayerNorm and RMSNorm", (
    C("F17a", "Derf ends below LayerNorm", "Chen et al. 2025",
      P("diff", (DERF, pre("layernorm")), 0.0, "below"), departs=SHORT, seeds=10),
    C("F17b", "Derf ends below DyT", "Chen et al. 2025",
      P("diff", (DERF, DYT), 0.0, "below"), departs=SHORT, seeds=10),
    C("F17c", "SeeDNorm ends below RMSNorm", "Cai et al. 2025",
      P("diff", (pre("seednorm"), pre("rmsnorm")), 0.0, "below"), departs=SHORT),
    C("F17d", "DyT matches LayerNorm", "Zhu et al. 2025",
      P("diff", (DYT, pre("layernorm")), CLOSE, "within"), departs=SHORT, seeds=10),
    C("F17e", "DyT with the attention input's a apart (0.8 there, 0.2 elsewhere) matches "
      "LayerNorm", "Zhu et al. 2025 (their LLaMA 7B init)",
      P("diff", (DYT_APART, pre("layernorm")), CLOSE, "within"),
      departs=SHORT + "; the init was tuned at 7B", seeds=10),
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
# QK-clip acts only on logits over tau: at F16's best rates (1e-2, 3e-2) Muon's stay under 60 and
# the clipped runs equal Muon's to the bit (the pilot), so its claims read rates where it acts
# (0.1: Muon's largest logit ~2,800, 0.3: ~2e5; both arms diverge at 1)
CLIP_LR, ACTS_LR = 0.3, 0.1
over_tau = lambda lr: Gate(  # noqa: E731
    "Muon's logits stay under tau at this rate: nothing for QK-clip to clip",
    P("mean", ({**MUON, "lr": lr},), KIMI_TAU, "above", measure="peak_logit"))
F16 = Finding("f16_logit_controls", "F16: the logit-control league at each control's own rates", (
    C("F16a", "QK-norm with soft-capping keeps its loss within 0.1 nats of its best up to 1.5x "
      "further above its best rate than QK-norm alone", "Rybakov et al. 2024",
      P("curve_ratio", (QKCAP, QKNORM), 1.5, "above", stat="span_up", measure=LOSS),
      lr="curve", departs="the paper's stable rate (no divergence) read as the span of rates "
              "within 0.1 nats of the best; " + SHORT, seeds=10),
    C("F16b", f"At lr {CLIP_LR}, the largest swept rate at which Muon trains, QK-clip holds the "
      "largest attention logit near tau (100)", "Kimi Team 2025",
      P("mean", ({**CLIPPED, "lr": CLIP_LR},), 1.5 * KIMI_TAU, "below", measure="peak_logit"),
      lr="fixed", gate=over_tau(CLIP_LR), departs=SHORT),
    C("F16c", f"At lr {ACTS_LR}, where Muon's largest logit passes tau, QK-clip costs no loss: "
      "its final loss is within 0.05 nats of Muon's without it, or below", "Kimi Team 2025",
      P("paired", ({**CLIPPED, "lr": ACTS_LR}, {**MUON, "lr": ACTS_LR}), CLOSE, "below",
        measure=LOSS),
      lr="fixed", gate=over_tau(ACTS_LR), departs=SHORT),
    C("F16d", "Each logit control lowers the LR sensitivity of the unprotected model",
      "Wortsman et al. 2023; Rybakov et al. 2024; Zhai et al. 2023; Qiu et al. 2025",
      *(P("curve", (UNPROTECTED, arm), SENS_GAP, "above", measure=LOSS)
        for arm in (QKNORM, QKCAP, SOFTCAP, SIGMA_ARM, GATED)), lr="curve", departs=SHORT),
    C("F16e", "Gated attention keeps its loss within 0.1 nats of its best further above its "
      "best rate than the unprotected model", "Qiu et al. 2025",
      P("curve_ratio", (GATED, UNPROTECTED), 1.0, "above", stat="span_up", measure=LOSS),
      lr="curve", departs=SHORT, seeds=7),
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
      P("diff", (HC4, PLAIN_SUM), 0.0, "below"), departs=LEAGUE_SIZE, seeds=7),
    C("F19b", "Manifold-constrained hyper-connections end below Pre-LN's plain sum", XIE,
      P("diff", (MHC4, PLAIN_SUM), 0.0, "below"), departs=LEAGUE_SIZE, seeds=10),
    C("F19d", "Frac-connections (2 fractions) end below Pre-LN's plain sum",
      "Zhu et al. 2025b", P("diff", (FRAC2, PLAIN_SUM), 0.0, "below"), departs=LEAGUE_SIZE),
    C("F19e", "Head-wise gated attention ends below Pre-LN without it", "Qiu et al. 2025",
      P("diff", (GATED12, PLAIN_SUM), 0.0, "below"), departs=LEAGUE_SIZE, seeds=6),
), plots=("lr_sensitivity.png", "loss_curves.png"))

NOISE = "model.stream_noise"
MHC_SEP = TOPOLOGY(**{"model.connection": "mhc", "model.streams": 4, NOISE: 0.3})
LITE_SEP = TOPOLOGY(**{"model.connection": "mhc_lite", "model.streams": 4, NOISE: 0.3})
HC4_ONLY = {**HC4, NOISE: None}
F19MHC = Finding("f19_mhc", "F19's mHC claim with streams that can separate", (
    C("F19c", "Manifold-constrained hyper-connections, their streams' copy symmetry broken at "
      "init, end at least as well as hyper-connections", XIE,
      P("diff", (MHC_SEP, HC4_ONLY), CLOSE, "below"), departs=LEAGUE_SIZE + "; the paper does "
      "not say how its streams start: normlab adds N(0, 0.3^2) to each stream's H_post logits",
      seeds=10),
    C("F19f", "mHC-lite's exact doubly stochastic H_res ends as well as mHC's Sinkhorn one",
      "mHC-lite, 2026", P("diff", (LITE_SEP, MHC_SEP), CLOSE, "within"),
      departs=LEAGUE_SIZE, seeds=10),
), plots=("lr_sensitivity.png", "loss_curves.png"))

DATA, SMALL_DATA, WHOLE_DATA = "data.train_tokens", 3546, None  # 118x fewer train tokens
VERMA = "Verma 2026"
VERMA_SIZE = ("500 steps of a 0.22M-parameter GPT on 3,546 or 418,544 train characters (144 "
              "and 1.2 passes); the paper's 64M model trained 5,000 steps on 1M or 118M tokens "
              "(164 and 1.4 passes)")
DYT_WHOLE, DYT_SMALL = {**DYT, DATA: WHOLE_DATA}, {**DYT, DATA: SMALL_DATA}
LN_WHOLE, LN_SMALL = {**pre("layernorm"), DATA: WHOLE_DATA}, {**pre("layernorm"), DATA: SMALL_DATA}
FINAL = "final_val_loss"  # Verma compares the validation loss at the end of training
F20 = Finding("f20_dyt_data", "F20: DyT against LayerNorm as the dataset grows", (
    C("F20a", "At a fixed step count DyT's final loss relative to LayerNorm's is worse on a 118x "
      "larger dataset than on the small one", VERMA,
      P("contrast", (DYT_WHOLE, LN_WHOLE, DYT_SMALL, LN_SMALL), 0.0, "above",
        weights=(1, -1, -1, 1), measure=FINAL), lr="fixed", seeds=10, departs=VERMA_SIZE),
    C("F20b", "At a fixed step count a smaller share of DyT's units saturates (|a x| > 2) on the "
      "118x larger dataset", VERMA,
      P("ratio2", (DYT_WHOLE, DYT_SMALL), 1.0, "below", measure="verma_saturation"),
      lr="fixed", seeds=10, departs=VERMA_SIZE),
    C("F20c", "On the small dataset DyT ends below LayerNorm", VERMA,
      P("diff", (DYT_SMALL, LN_SMALL), 0.0, "below", measure=FINAL), lr="fixed", seeds=10,
      departs=VERMA_SIZE),
    C("F20d", "On the 118x larger dataset DyT ends above LayerNorm", VERMA,
      P("diff", (DYT_WHOLE, LN_WHOLE), 0.0, "above", measure=FINAL), lr="fixed", seeds=10,
      departs=VERMA_SIZE),
), plots=("loss_curves.png",))

# F21: each norm under AdamW and under Muon, at its own stable best rate
ABOUZEID = "Abouzeid 2026"
OPT = "optim.name"
RMS_A, RMS_M = {**pre("rmsnorm"), OPT: "adamw"}, {**pre("rmsnorm"), OPT: "muon"}
DYT_A, DYT_M = {**pre("dyt"), **GAIN, OPT: "adamw"}, {**pre("dyt"), **GAIN, OPT: "muon"}
DERF_A = {**pre("derf"), **GAIN, "norm.alpha": 0.5, OPT: "adamw"}
DERF_M = {**DERF_A, OPT: "muon"}
DERF_M3 = {**DERF_M, "norm.alpha": 0.3}
INTERACTION = (1, -1, -1, 1)  # (X Muon - RMSNorm Muon) - (X AdamW - RMSNorm AdamW)
FACTORIAL = ("500 steps of a 4-layer d=64 GPT (0.2M parameters) on 0.4M characters; the paper's "
             "factorial is 1B parameters for 1,000 steps")
F21 = Finding("f21_norm_optim", "F21: does the optimizer care how you normalize?", (
    C("F21a", "Derf's gap to RMSNorm is larger under Muon than under AdamW", ABOUZEID,
      P("contrast", (DERF_M, RMS_M, DERF_A, RMS_A), 0.0, "above", weights=INTERACTION),
      departs=FACTORIAL, seeds=10),
    C("F21b", "DyT's gap to RMSNorm grows by no more than 0.05 nats under Muon", ABOUZEID,
      P("contrast", (DYT_M, RMS_M, DYT_A, RMS_A), CLOSE, "below", weights=INTERACTION),
      departs=FACTORIAL, seeds=10),
    C("F21c", "Under Muon, Derf with a = 0.3 ends below Derf with its default a = 0.5", ABOUZEID,
      P("diff", (DERF_M3, DERF_M), 0.0, "below"), departs=FACTORIAL),
    C("F21d", "More of Derf's units saturate under Muon than under AdamW", ABOUZEID,
      P("diff", (DERF_M, DERF_A), 0.0, "above", measure="norm_saturation"),
      departs=FACTORIAL + "; saturation read as |erf| >= 0.99 at the last probe"),
), plots=("lr_sensitivity.png", "loss_curves.png"))

SIGMA = "model.sigma_reparam"
PLAIN_HI = {QK: False, SIGMA: False, "lr": MAX}
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
   figures=ENTROPY_FIGURES)

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

# F14's embedding-lr arm: SP with the embeddings' lr x m_N, heads untied (a config of its own)
EMB, KALRA = "optim.emb_lr_mult", "Kalra & Barkeshli 2026"
F14EMB = Finding("f14_emb_lr", "F14's embedding-lr arm: SP with its embeddings' learning rate "
                 "raised by the width factor", (
    stays("F14f", "SP with its embeddings' learning rate raised by the width factor (x4 at 4x "
          "width) keeps its best learning rate as the model widens 4x, as muP does", KALRA,
          size("sp", n_embd=32, n_layer=2, **{EMB: None}),
          size("sp", n_embd=128, n_layer=2, **{EMB: 4.0}), seeds=10),
), plots=("lr_transfer.png", "lr_sensitivity.png", "loss_curves.png"))

# F13's combined interventions with the one F6's sweep cannot run, muParam: a sweep of its own at
# F6's model, rates and steps, every arm's parametrization named. z-loss 1e-4 runs exactly where
# qk-layernorm does (conf/experiment/f13_muparam.yaml), so qk_norm names both.
NEITHER, QK_Z = {"param": "sp", QK: False}, {"param": "sp", QK: True}
ALL3 = {**QK_Z, "param": "mup"}
MUPARAM = ("normlab's muP (Yang et al. 2022's table) with its base at half the width, in place of "
           "the paper's simple muParam; a single width")
F13MU = Finding("f13_muparam", "F13 with muParam: the combined interventions of Wortsman et al. "
                "2023 (Figure 1)", (
    C("F13d", "With qk-layernorm, z-loss and muParam the loss stays within 0.1 nats of its best "
      "up to 10x above its best rate, further than without the three", WORTSMAN,
      P("curve_level", (ALL3,), SPAN_UP, "above", stat="span_up", measure=LOSS),
      P("curve_ratio", (ALL3, NEITHER), 1.0, "above", stat="span_up", measure=LOSS), lr="curve",
      departs=MUPARAM, seeds=10),
    C("F13e", "With qk-layernorm and z-loss on, muParam lowers the LR sensitivity while the best "
      "loss stays", WORTSMAN,
      P("curve", (QK_Z, ALL3), SENS_GAP, "above", measure=LOSS),
      P("curve", (ALL3, QK_Z), CLOSE, "below", stat="best", measure=LOSS), lr="curve",
      departs=MUPARAM, seeds=10),
), plots=("lr_sensitivity.png", "loss_curves.png"))
# fmt: on
