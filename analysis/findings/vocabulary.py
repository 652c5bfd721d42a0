"""The words the registry declares its claims in: the margins (one value per word across the
findings), the sources, the seeds per arm, and the helpers that build claims and arms.

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
    SUN_RATIO = 1000    F18src: Sun et al.'s definition, |h| > 100 (MASSIVE) and > 1000 x the median
    SHIFT = 0.25        F14 "the best lr moves": its log10 moves at least a quarter decade (half
                        the grid's step; SP's theory for Adam's hidden rates: 0.6 for 4x width)
    BAND = 0.25         F14 "the best lr stays": its log10 moves less than a quarter decade

Seeds per arm (``seeds``): SEEDS for an interval claim, RATE_SEEDS for a rate, where a rate's
exact interval of n out of n first clears MOST at n = 6; the pilots' power calculation that
fixes them claim by claim is docs/reproducing.md's next step, before the freeze.
"""

from __future__ import annotations

from typing import Any

from analysis.findings.declare import MAX, Claim, Figure
from analysis.findings.declare import Part as P

WORSE, CLOSE, FAILS, DEEP_OK, F4_TOL, FACTOR, MOST = 0.10, 0.05, 0.20, 0.30, 0.02, 1.5, 0.5
UPDATE_RATIO, FLAT_SLOPE, SHRINK_SLOPE, FLAT_RATIO, GROW_RATIO = 2.0, 0.15, -0.3, 1.5, 2.0
LOGIT_GROWTH, SENS_GAP, SPAN_UP, ACC_FACTOR = 10.0, 0.03, 10.0, 1.25
RMS_GROWTH, NEAR_ONE, COS_DROP, GROWS, FLOOR, DRIFT, LONG_RUN = 1.2, 0.9, 0.01, 2.0, 0.1, 1.0, 1e4
SINKS, MASSIVE, SUN_RATIO = 0.1, 100.0, 1000.0
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


LOSS = "final_val_loss"  # what a loss-vs-lr curve reads
# F10's and F15's figure: entropy, peak logit and loss against the learning rate
ENTROPY_FIGURES = (
    Figure(
        "entropy_vs_lr.png", "optim.lr", ("min_attn_entropy", "max:attn/max_logit", "best_val_loss")
    ),
)


def pre(norm: str) -> dict:
    return {"placement": "pre", "norm": norm}
