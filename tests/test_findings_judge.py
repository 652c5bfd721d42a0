"""Claims decided from hand-made per-run tables (analysis/findings/judge.py), each estimand
against scipy's own test or a hand-computed case; the lr rule, the decide seeds, the gates,
Holm, and the recompute from a verdict.json's table alone."""

from __future__ import annotations

import json
import math

import pytest
import scipy.stats as sp

from analysis.findings.declare import MAX, MIN, REF_LR, Claim, Finding, Gate, Part
from analysis.findings.judge import VERDICTS, judge_claim, judge_finding


def rows(arm: dict, values: list, outcome: str = "trained", measure: str = "best_val_loss",
         first_seed: int = 0) -> list[dict]:  # fmt: skip
    """One table row per value (None: a diverged run, no loss), seed = first_seed + position."""
    return [
        {"arm": dict(arm), "seed": first_seed + i,
         "outcome": "diverged" if x is None else outcome, "values": {measure: x}}
        for i, x in enumerate(values)
    ]  # fmt: skip


def table(*groups: list[dict], decide: list | None = None, **settings) -> dict:
    found = [r for g in groups for r in g]
    return {"rows": found, "settings": settings, "decide_seeds": decide or [], "left_out": {}}


def claim(*parts: Part, lr: str = "fixed", seeds: int = 5, gate: Gate | None = None) -> Claim:
    return Claim("X1", "a claim", "a paper", parts, seeds, lr=lr, gate=gate)


def only(verdict: dict) -> dict:
    (effect,) = verdict["effects"].values()
    return effect


A, B = {"placement": "a"}, {"placement": "b"}


def test_a_difference_is_welchs_interval() -> None:
    a, b = [2.61, 2.58, 2.66], [2.50, 2.55, 2.49, 2.57]
    v = judge_claim(claim(Part("diff", (A, B), 0.02, "above")), table(rows(A, a), rows(B, b)))
    ref = sp.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    e = only(v)
    assert (e["lo"], e["hi"]) == pytest.approx((ref.low, ref.high), rel=1e-5)
    assert e["outcome"] == v["status"] == ("PASS" if ref.low >= 0.02 else "INCONCLUSIVE")
    # the claim's own test against its margin: Welch's t of (a - b - 0.02)
    shifted = sp.ttest_ind(a, [x + 0.02 for x in b], equal_var=False, alternative="greater")
    assert e["p_pass"] == pytest.approx(shifted.pvalue, rel=1e-4)


def test_a_paired_difference_is_the_t_interval_of_per_seed_differences() -> None:
    a, b = [2.61, 2.58, 2.66, 2.70], [2.59, 2.55, 2.65, 2.66]
    v = judge_claim(claim(Part("paired", (A, B), 0.05, "below")), table(rows(A, a), rows(B, b)))
    ref = sp.ttest_rel(a, b).confidence_interval(0.95)
    e = only(v)
    assert (e["lo"], e["hi"]) == pytest.approx((ref.low, ref.high), rel=1e-5)
    assert v["status"] == "PASS" and e["method"] == "paired t over seeds"
    # unpaired, the same numbers straddle the margin: the pairing is what decides it
    unpaired = judge_claim(
        claim(Part("diff", (A, B), 0.05, "below")), table(rows(A, a), rows(B, b))
    )
    assert unpaired["status"] == "INCONCLUSIVE"


def test_a_rate_is_clopper_pearson_and_two_rates_fishers_test() -> None:
    t = table(rows(A, [2.0] * 5, "trained"), rows(A, [3.2] * 3, "stalled", first_seed=5),
              rows(B, [3.2] * 7, "stalled"), rows(B, [2.0], first_seed=7))  # fmt: skip
    v = judge_claim(claim(Part("rate", (A,), 0.5, "above", event="trained"), seeds=8), t)
    ref = sp.binomtest(5, 8).proportion_ci(0.95, method="exact")
    e = only(v)
    assert (e["effect"], e["lo"], e["hi"]) == pytest.approx((5 / 8, ref.low, ref.high), rel=1e-5)
    assert v["status"] == "INCONCLUSIVE"
    v = judge_claim(claim(Part("rate2", (B, A), 0.0, "above"), seeds=8), t)  # not_trained
    e = only(v)
    p = sp.fisher_exact([[7, 1], [3, 5]], alternative="greater")[1]
    assert e["p_pass"] == pytest.approx(p, rel=1e-6) and e["k"] == [7, 3]
    assert v["status"] == ("PASS" if p <= 0.025 else "INCONCLUSIVE")
    # 8 of 8 against 0 of 8 is decided
    t = table(rows(B, [3.2] * 8, "stalled"), rows(A, [2.0] * 8))
    assert judge_claim(claim(Part("rate2", (B, A), 0.0, "above"), seeds=8), t)["status"] == "PASS"


def test_pairs_count_the_seeds_where_one_arm_ends_worse() -> None:
    cold = rows(A, [3.3, 2.9, 2.6, 3.3], "trained")
    cold[0]["outcome"] = cold[3]["outcome"] = "stalled"  # stalled where warmup trained: worse
    warm = rows(B, [2.4, 2.5, 2.55, 3.3])
    warm[3]["outcome"] = "stalled"  # both stalled: not worse
    part = Part("pairs", (A, B), 0.5, "above", by=0.1)
    e = only(judge_claim(claim(part, seeds=4), table(cold, warm)))
    # seed 0 stalled vs trained, seed 1 +0.4, seed 2 +0.05 (< 0.1), seed 3 both stalled
    assert (e["k"], e["n"]) == ([2], [4])


def test_every_run_is_an_exact_rate_test_of_the_runs_off_its_side() -> None:
    """ "Every run" is the rate of runs off the margin's side against EVERY_OFF = 0.1, by the
    exact binomial: none off in n passes when 0.9^n <= 0.025 (n >= 36), and it fails when that
    many off are unlikely at a rate of 0.1."""
    part = Part("every", (A,), 0.1, "above", measure="min_entropy")
    few = judge_claim(claim(part), table(rows(A, [0.5, 0.8, 1.2], measure="min_entropy")))
    assert few["status"] == "INCONCLUSIVE" and only(few)["p_pass"] == pytest.approx(0.9**3)
    many = table(rows(A, [0.5 + i / 100 for i in range(36)], measure="min_entropy"))
    e = only(judge_claim(claim(part), many))
    assert e["outcome"] == "PASS" and e["p_pass"] == pytest.approx(0.9**36)  # 0.0225
    assert (e["effect"], e["violations"], e["worst"]) == (0.0, 0, 0.5)
    ref = sp.binomtest(0, 36, 0.1).proportion_ci(0.95, "exact")  # two-sided 95%
    assert (e["lo"], e["hi"]) == pytest.approx((ref.low, ref.high), rel=1e-6)
    half = rows(A, [0.5, 0.05, 1.2, 0.01, 0.02, 0.9, 0.03, 0.8], measure="min_entropy")
    v = judge_claim(claim(part), table(half))  # 4 of 8 off: P(X >= 4 | 8, 0.1) = 0.0050
    assert v["status"] == "FAIL" and only(v)["violations"] == 4 and only(v)["worst"] == 0.01
    assert only(v)["p_fail"] == pytest.approx(sp.binom.sf(3, 8, 0.1))


def test_a_split_compares_the_runs_a_measure_picks() -> None:
    collapsed = rows(A, [0.01, 0.02, 0.03, 0.05], "diverged", measure="min_entropy")
    healthy = rows(A, [1.0, 1.1, 0.9, 1.2], "trained", measure="min_entropy", first_seed=4)
    part = Part("split", (A,), 0.0, "above", where=("min_entropy", "below", 0.1))
    e = only(judge_claim(claim(part), table(collapsed, healthy)))
    p = sp.fisher_exact([[4, 0], [0, 4]], alternative="greater")[1]
    assert e["k"] == [4, 0] and e["n"] == [4, 4] and e["p_pass"] == pytest.approx(p)


def test_a_slope_is_decided_on_each_seeds_log_log_fit() -> None:
    found = []
    for depth, scale in ((6, 1.0), (12, 0.71), (24, 0.5)):
        found += rows({"placement": "pre", "n_layer": depth},
                      [scale * f for f in (1.0, 1.05, 0.97)], measure="last_fc2")  # fmt: skip
    part = Part("slope", ({"placement": "pre"},), -0.3, "below", measure="last_fc2")
    e = only(judge_claim(claim(part), table(found)))
    slope = sp.linregress(
        [math.log(d) for d in (6, 12, 24)], [math.log(s) for s in (1.0, 0.71, 0.5)]
    ).slope  # every seed's curve is the same up to a factor: the same slope
    assert e["effect"] == pytest.approx(slope, rel=1e-5) and e["outcome"] == "PASS"


def test_stable_best_never_takes_a_cliff_rate() -> None:
    """Grid seeds 0-2: at lr 1e-2 one seed stalled (the mean still lowest, as two lucky seeds
    would make it); the rule takes 3e-3, where every grid seed trained, and decides on the
    fresh seeds 100.. at that rate only, at most ``seeds`` of them."""
    grid = rows({**A, "lr": 3e-3}, [2.3, 2.32, 2.31]) + rows({**A, "lr": 1e-3}, [2.5, 2.5, 2.52])
    cliff = rows({**A, "lr": 1e-2}, [2.0, 2.1, 3.2])
    cliff[2]["outcome"] = "stalled"
    fresh = rows({**A, "lr": 3e-3}, [2.31, 2.29, 2.33, 2.30, 2.32, 9.9], first_seed=100)
    part = Part("mean", (A,), 2.4, "below")
    v = judge_claim(claim(part, lr="stable_best", seeds=5),
                    table(grid, cliff, fresh, decide=list(range(100, 106))))  # fmt: skip
    arm = v["arms"]["a"]
    assert arm["lr"] == 3e-3 and arm["runs"] == 5 and v["decided_on"] == [100, 101, 102, 103, 104]
    assert only(v)["effect"] == pytest.approx(statistics_mean([2.31, 2.29, 2.33, 2.30, 2.32]))
    assert v["status"] == "PASS"


def statistics_mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def test_symbols_resolve_against_the_runs() -> None:
    found = rows({"placement": "post", "n_layer": 3}, [2.0, 2.1])
    found += rows({"placement": "post", "n_layer": 12}, [3.0, 3.1])
    part = Part("diff", ({"placement": "post", "n_layer": MAX},
                         {"placement": "post", "n_layer": MIN}), 0.2, "above")  # fmt: skip
    assert only(judge_claim(claim(part), table(found)))["effect"] == pytest.approx(1.0)
    ref = Part("mean", ({"lr": REF_LR},), 3.0, "below")
    v = judge_claim(claim(ref), table(rows({"lr": 1e-3}, [2.0, 2.1])))
    assert v["status"] == "NO DATA" and "reproduce" not in v["note"] and "ref_lr" in v["note"]


def test_gates_are_decided_before_and_whatever_the_outcome() -> None:
    data = table(rows(A, [2.0, 2.1, 2.05]), max_steps=1000)
    long = Gate("divergence comes late", setting=("max_steps", 1e4))
    v = judge_claim(claim(Part("mean", (A,), 3.0, "below"), gate=long), data)
    assert v["status"] == "NOT TESTABLE" and v["before_gate"] == "PASS"
    assert "max_steps 1000, needs >= 10000" in v["note"]
    # a precondition on another measure: absent -> NOT TESTABLE, present -> decided
    pre = rows(B, [1.05, 1.1, 1.08], measure="rms_late_growth")
    gate = Gate("no growth to damp", Part("ratio", (B,), 1.2, "above", measure="rms_late_growth"))
    v = judge_claim(
        claim(Part("mean", (A,), 3.0, "below"), gate=gate), table(rows(A, [2.0, 2.1]), pre)
    )
    assert v["status"] == "NOT TESTABLE" and "no growth to damp" in v["note"]
    grew = rows(B, [1.5, 1.6, 1.55], measure="rms_late_growth")
    v = judge_claim(
        claim(Part("mean", (A,), 3.0, "below"), gate=gate), table(rows(A, [2.0, 2.1]), grew)
    )
    assert v["status"] == "PASS"
    # no arm trained: a loss comparison between plateaus is NOT TESTABLE
    flat = table(rows(A, [3.2, 3.21], "stalled"), rows(B, [3.25, 3.22], "stalled"))
    v = judge_claim(claim(Part("diff", (A, B), 0.05, "within")), flat)
    assert v["status"] == "NOT TESTABLE" and "no arm trained" in v["note"]


def test_holm_adjusts_within_a_finding() -> None:
    """Two claims that pass raw with one-sided p of about 0.01 and 0.02: Holm multiplies the
    smaller by 2 (0.02 <= 0.025, kept) and the larger by 1 but not below the first."""
    parts = []
    data = []
    for i, (a, b) in enumerate((([2.6, 2.7, 2.65, 2.62], [2.5, 2.55, 2.52, 2.49]),
                                ([2.6, 2.64, 2.7, 2.61], [2.52, 2.55, 2.5, 2.6]))):  # fmt: skip
        arm_a, arm_b = {"placement": f"a{i}"}, {"placement": f"b{i}"}
        parts.append(Part("diff", (arm_a, arm_b), 0.0, "above"))
        data += rows(arm_a, a) + rows(arm_b, b)
    finding = Finding("x", "x", tuple(Claim(f"C{i}", "c", "s", (p,), 4, lr="fixed")
                                      for i, p in enumerate(parts)))  # fmt: skip
    verdicts = judge_finding(finding, table(data))
    raw = [only(v)["p_pass"] for v in verdicts]
    small, large = sorted(raw)
    adjusted = {small: min(1, 2 * small), large: max(min(1, 2 * small), large)}
    for v, p in zip(verdicts, raw, strict=True):
        assert v["holm_p_pass"] == pytest.approx(adjusted[p], rel=1e-4)
        want = v["status"] if adjusted[p] <= 0.025 or v["status"] != "PASS" else "INCONCLUSIVE"
        assert v["holm_status"] == want
    assert all(v["mode"] == "exploratory" for v in verdicts)  # no freeze, no fresh seeds


def test_a_verdict_is_recomputed_from_its_json_alone() -> None:
    finding = Finding("x", "x", (
        Claim("C1", "c", "s", (Part("rate2", (B, A), 0.0, "above"),), 4, lr="fixed"),
        Claim("C2", "c", "s", (Part("diff", (A, B), 0.1, "below"),), 4, lr="fixed"),
    ))  # fmt: skip
    data = table(rows(A, [2.0, 2.1, 2.05, 2.2]), rows(B, [3.2, 3.3, None, 2.9], "stalled"))
    verdicts = judge_finding(finding, data)
    record = json.loads(json.dumps({"claims": verdicts, "table": data}))
    again = judge_finding(finding, record["table"])
    assert [json.dumps(v, sort_keys=True) for v in again] == [
        json.dumps(v, sort_keys=True) for v in record["claims"]
    ]


def test_confirmatory_only_under_the_frozen_claim_on_its_fresh_seeds() -> None:
    from analysis.findings.declare import Frozen, claim_hash

    c = Claim("C1", "c", "s", (Part("mean", (A,), 3.0, "below"),), 3, lr="fixed")
    finding = Finding("x", "x", (c,))
    fresh = table(rows(A, [2.0, 2.1, 2.05, 2.2], first_seed=1000), decide=[1000, 1001, 1002, 1003])
    frozen = Frozen("r", {"C1": {"hash": claim_hash(c), "first_seed": 1000}})
    (v,) = judge_finding(finding, fresh, frozen)
    assert v["mode"] == "confirmatory" and v["decided_on"] == [1000, 1001, 1002]  # its n, no more
    moved = Finding("x", "x", (Claim("C1", "c", "s", (Part("mean", (A,), 2.9, "below"),), 3,
                                     lr="fixed"),))  # fmt: skip
    assert judge_finding(moved, fresh, frozen)[0]["mode"] == "exploratory"  # changed after
    pilot = table(rows(A, [2.0, 2.1, 2.05]), decide=[])
    assert judge_finding(finding, pilot, frozen)[0]["mode"] == "exploratory"  # not fresh seeds


def test_a_claim_that_an_arm_trains_fails_when_none_does() -> None:
    """ "Trains at depth" is a rate of trained runs: none trained is its FAIL, not the plateau
    gate a loss comparison takes."""
    stalled = table(rows(A, [3.2] * 6, "stalled"))
    v = judge_claim(claim(Part("rate", (A,), 0.5, "above", event="trained"), seeds=6), stalled)
    assert v["status"] == "FAIL" and only(v)["k"] == [0]


def test_within_a_margin_fails_on_either_side() -> None:
    """ "Matches within ±0.05": FAIL's p is the smaller one-sided Welch test of lying beyond
    +0.05 or beyond -0.05; here the arms are 0.2 apart, far outside."""
    a, b = [2.30, 2.32, 2.31, 2.29], [2.10, 2.12, 2.09, 2.11]
    v = judge_claim(claim(Part("diff", (A, B), 0.05, "within")), table(rows(A, a), rows(B, b)))
    above = sp.ttest_ind(a, [x + 0.05 for x in b], equal_var=False, alternative="greater").pvalue
    e = only(v)
    assert v["status"] == "FAIL" and e["p_fail"] == pytest.approx(above, rel=1e-4)


def test_curve_statistics_per_seed_by_hand() -> None:
    """Two seeds, three rates; l0 = 4.0 (the arms' mean first train loss), a diverged run counts
    at l0. Sensitivity (Wortsman et al.): the mean over rates of l(lr) - min l; span_up: how far
    above its best rate the loss stays within 0.10 of it."""

    def arm(qk: bool, losses: dict[float, list]) -> list[dict]:
        out = []
        for lr, per_seed in losses.items():
            for seed, x in enumerate(per_seed):
                out.append({"arm": {QK: qk, "lr": lr}, "seed": seed,
                            "outcome": "diverged" if x is None else "trained",
                            "values": {"final_val_loss": x, "first_train_loss": 4.0}})  # fmt: skip
        return out

    plain = arm(False, {1e-3: [2.5, 2.6], 1e-2: [2.0, 2.1], 1e-1: [None, 3.0]})
    normed = arm(True, {1e-3: [2.5, 2.6], 1e-2: [2.0, 2.1], 1e-1: [2.05, 2.18]})
    sens = {  # per seed: mean(l - min l) over the three rates
        False: [(0.5 + 0 + 2.0) / 3, (0.5 + 0 + 0.9) / 3],
        True: [(0.5 + 0 + 0.05) / 3, (0.5 + 0 + 0.08) / 3],
    }
    part = Part("curve", ({QK: False}, {QK: True}), 0.03, "above", measure="final_val_loss")
    e = only(judge_claim(claim(part, lr="curve"), table(plain, normed)))
    ref = sp.ttest_ind(sens[False], sens[True], equal_var=False).confidence_interval(0.95)
    assert e["effect"] == pytest.approx(statistics_mean(sens[False]) - statistics_mean(sens[True]))
    assert (e["lo"], e["hi"]) == pytest.approx((ref.low, ref.high), rel=1e-5)
    span = Part("curve_level", ({QK: True},), 10.0, "above", stat="span_up",
                measure="final_val_loss")  # fmt: skip
    assert only(judge_claim(claim(span, lr="curve"), table(normed)))["effect"] == pytest.approx(
        10.0
    )


QK = "model.qk_norm"


def test_log_best_lr_is_the_parabolas_vertex_between_grid_points() -> None:
    """F14's statistic by hand: losses (x - x*)^2 + 2 at x = log10(lr) put the vertex at x*;
    a best rate at the grid's edge reads as the edge; two seeds' shifts compared by Welch."""
    from analysis.findings.estimands import log_best_lr

    def curve(x_star: float) -> dict[float, float]:
        return {10.0**x: (x - x_star) ** 2 + 2 for x in (-3, -2.5, -2, -1.5, -1)}

    assert log_best_lr(curve(-1.7)) == pytest.approx(-1.7)
    assert log_best_lr(curve(-2.2)) == pytest.approx(-2.2)
    assert log_best_lr(curve(-4.0)) == -3  # the edge: the true best may lie outside
    assert log_best_lr({1e-3: 2.0, 1e-2: 2.0, 1e-1: 2.0}) == pytest.approx(-3)  # first of ties

    def arm(width: int, stars: list[float]) -> list[dict]:
        return [
            {"arm": {"n_embd": width, "lr": lr}, "seed": seed, "outcome": "trained",
             "values": {"final_val_loss": loss, "first_train_loss": 9.0}}
            for seed, star in enumerate(stars) for lr, loss in curve(star).items()
        ]  # fmt: skip

    narrow, wide = arm(32, [-1.9, -2.1]), arm(128, [-2.45, -2.55])
    part = Part("curve", ({"n_embd": 32}, {"n_embd": 128}), 0.25, "above", stat="log_best_lr",
                measure="final_val_loss")  # fmt: skip
    e = only(judge_claim(claim(part, lr="curve"), table(narrow, wide)))
    ref = sp.ttest_ind([-1.9, -2.1], [-2.45, -2.55], equal_var=False).confidence_interval(0.95)
    assert e["effect"] == pytest.approx(0.5)
    assert (e["lo"], e["hi"]) == pytest.approx((ref.low, ref.high), rel=1e-5)
    # one seed whose optimum lies past the grid (x* = -0.5 > -1): censored, NOT TESTABLE, its
    # measured verdict kept beside
    past = arm(128, [-2.45, -0.5])
    verdict = judge_claim(claim(part, lr="curve"), table(narrow, past))
    assert only(verdict)["censored"] == [0, 1]
    assert verdict["status"] == "NOT TESTABLE" and verdict["before_gate"] in VERDICTS
    assert "grid's edge (0/1 of 2/2 seeds)" in verdict["note"]
