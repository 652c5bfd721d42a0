"""Claims decided on report.json pieces with known numbers (analysis/findings): the rules
every check shares (only completed and diverged runs count), F1 (init probe), F5 and F7 (norms),
F6 (learning rates and QK-norm)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analysis.findings import decide_finding
from analysis.findings.lr import sensitivity
from analysis.findings.settings import ReproduceConfig
from tests.reports import FAILED, by_id, row


# --- the claims' margins --------------------------------------------------------------------------
def test_each_claim_declares_its_margins_from_the_one_table() -> None:
    """Every registry entry names the margins its check decides by; one word has one value across
    the findings (analysis/findings/claims.py), and the verdict records them."""
    from analysis.findings import FINDINGS, claims

    for finding in FINDINGS.values():
        for claim in finding.claims:
            assert claim.margins, f"{claim.id} declares no margin"
            for name, value in claim.margins.items():
                assert value == getattr(claims, name.upper()), (claim.id, name)
    f5 = decide_finding("f5", {"variants": [row([2.0, 2.0], norm="layernorm")]})[0]
    assert f5.margins == {"close": 0.05} and f5.to_dict()["margins"] == {"close": 0.05}


# --- which runs count -----------------------------------------------------------------------------
def f2_report(pre_off: list, pre_on: list, post_off: list | None = None) -> dict:
    rows = [row(pre_off, placement="pre", lr=1e-3, warmup_steps=0)]
    rows += [row(pre_on, placement="pre", lr=1e-3, warmup_steps=100)]
    rows += [row(post_off or [3.0, 3.0], placement="post", lr=1e-3, warmup_steps=0)]
    rows += [row([2.5, 2.5], placement="post", lr=1e-3, warmup_steps=100)]
    return {"variants": rows}


def test_a_failed_run_is_not_a_diverged_run() -> None:
    """Runs that failed (a config error) once scored +inf like a divergence: Pre-LN with warmup
    "diverged" and F2b passed. A failed run is left out; a diverged one still scores +inf."""
    settings = ReproduceConfig(ref_lr=1e-3)
    v = by_id(decide_finding("f2", f2_report([2.5, 2.5], [FAILED, FAILED]), settings))
    assert v["F2b"].status == "NO DATA" and not v["F2b"].measured
    assert "0 completed or diverged runs (2 failed left out), need >= 2" in v["F2b"].note
    # Post-LN without warmup failed: F2a may not read that as "ends worse".
    v = by_id(decide_finding("f2", f2_report([2.5, 2.5], [2.5, 2.5], [FAILED, FAILED]), settings))
    assert v["F2a"].status == "NO DATA" and v["F2b"].status == "PASS"
    # A diverged run is a result: +inf, the variant as bad as its worst seed.
    v = by_id(decide_finding("f2", f2_report([2.5, 2.5], [2.5, None]), settings))
    assert v["F2b"].status == "PASS" and v["F2b"].measured["pre_warmup"] == "inf (diverged)"


def test_verdicts_use_the_completed_and_diverged_runs_of_a_variant() -> None:
    settings = ReproduceConfig(ref_lr=1e-3)
    # One seed failed: the mean is over those that completed, and it is still a verdict.
    v = by_id(
        decide_finding("f2", f2_report([2.6, FAILED, 2.61, 2.62], [2.5, 2.5, 2.51]), settings)
    )
    assert v["F2b"].status == "FAIL" and v["F2b"].measured["pre_no_warmup"] == pytest.approx(2.61)
    assert v["F2b"].intervals["gap"]["n"] == [3, 3]
    # One completed, one failed: fewer than 2 seeds, NO DATA.
    v = by_id(decide_finding("f2", f2_report([2.5, FAILED], [2.5, 2.5]), settings))
    assert v["F2b"].status == "NO DATA" and "1 failed left out" in v["F2b"].note


def test_failed_runs_count_nowhere_in_f5_f7() -> None:
    f5 = {
        "variants": [
            row([2.50, 2.52], placement="pre", norm="layernorm"),
            row([FAILED, FAILED], placement="pre", norm="rmsnorm"),
        ]
    }
    assert decide_finding("f5", f5)[0].status == "NO DATA"
    # A failed BatchNorm seed at batch 4 is not an accuracy of 0 (a diverged one is).
    flat = {4: [0.97, 0.97], 64: [0.97, 0.97]}
    bn = {4: [FAILED, 0.96, 0.96], 64: [0.97, 0.97]}
    v = by_id(
        decide_finding("f7", f7_report({"batchnorm": bn, "layernorm": flat, "rmsnorm": flat}))
    )
    drop = v["F7a"].intervals["batchnorm drop - layernorm drop"]
    assert v["F7a"].status == "FAIL" and drop["effect"] == pytest.approx(0.01)
    assert drop["n"] == [2, 2, 2, 2]  # the failed seed is in no arm


# --- F1: init probe ------------------------------------------------------------------------------
JITTER = (1.0, 1.03, 0.98)  # per seed, a different one at each depth: the seeds' slopes differ


def probe_report(post_slope: float, pre_slope: float, pre_growth: float) -> dict:
    """init_probe groups with last_fc2 = c * L**slope (each seed jittered) and act_norm rising
    by pre_growth (each seed's ratio jittered)."""
    groups = []
    for placement, slope, growth in (("post", post_slope, 1.0), ("pre", pre_slope, pre_growth)):
        for k, depth in enumerate((6, 12, 24, 48)):
            act = [1.0 + (growth - 1.0) * i / (depth - 1) for i in range(depth)]
            jitter = [JITTER[(k + i) % 3] for i in range(3)]
            fc2 = [0.2 * depth**slope * j for j in jitter]
            groups.append(
                {
                    "params": {"placement": placement, "n_layer": depth},
                    "last_fc2": sum(fc2) / 3,
                    "act_norm": act,
                    "per_seed": {"last_fc2": fc2, "act_ratio": [growth * j for j in JITTER]},
                }
            )
    return {"variants": [], "init_probe": groups}


def test_f1_pass_and_fail() -> None:
    good = decide_finding("f1", probe_report(0.05, -0.5, 7.0))
    assert [v.status for v in good] == ["PASS"] * 4
    # The effect is the mean of the seeds' own least-squares slopes (numpy's fit, by hand).
    report = probe_report(0.05, -0.5, 7.0)
    post = [g for g in report["init_probe"] if g["params"]["placement"] == "post"]
    x = np.log([g["params"]["n_layer"] for g in post])
    slopes = [np.polyfit(x, np.log([g["per_seed"]["last_fc2"][i] for g in post]), 1)[0]
              for i in range(3)]  # fmt: skip
    assert good[0].intervals["slope"]["effect"] == pytest.approx(np.mean(slopes), abs=1e-4)
    assert good[0].intervals["slope"]["n"] == [3]
    assert good[3].intervals["last/first"]["effect"] == pytest.approx(
        7.0 * np.prod(JITTER) ** (1 / 3), rel=1e-3
    )  # the geometric mean of the seeds' ratios
    bad = decide_finding("f1", probe_report(0.3, -0.15, 1.5))
    assert [v.status for v in bad] == ["FAIL", "FAIL", "PASS", "FAIL"]
    assert [v.status for v in decide_finding("f1", {"variants": []})] == ["NO DATA"] * 4
    # A probe.json from before the per-seed values: NO DATA, naming the fix.
    for g in report["init_probe"]:
        del g["per_seed"]
    old = decide_finding("f1", report)
    assert {v.status for v in old} == {"NO DATA"} and "rerun f1" in old[0].note


# --- F5, F7: norms -------------------------------------------------------------------------------
def test_f5_tolerance() -> None:
    def report(rms: list) -> dict:
        rows = [
            row([2.50, 2.52], placement="pre", norm="layernorm"),
            row(rms, placement="pre", norm="rmsnorm"),
        ]
        return {"variants": rows}

    # 0.03 apart, 2 seeds: the interval (t with 2 df, ±0.061) reaches past 0.05.
    v = decide_finding("f5", report([2.53, 2.55]))[0]
    assert v.status == "INCONCLUSIVE" and "seeds per arm would settle it" in v.note

    def tight(rms: list) -> dict:
        rows = [row([2.50, 2.51, 2.52], placement="pre", norm="layernorm")]
        return {"variants": [*rows, row(rms, placement="pre", norm="rmsnorm")]}

    # 0.02 apart, sd 0.01, 3 seeds: 0.02 ± 2.776 * 0.00816 = [-0.003, 0.043], inside ±0.05.
    v = decide_finding("f5", tight([2.52, 2.53, 2.54]))[0]
    assert v.status == "PASS"
    assert v.intervals["pre rmsnorm - layernorm"]["hi"] == pytest.approx(0.0427, abs=1e-3)
    v = decide_finding("f5", tight([2.60, 2.61, 2.62]))[0]  # 0.10 apart: [0.077, 0.123]
    assert v.status == "FAIL"


def f7_report(accs: dict[str, dict[int, list[float | None]]]) -> dict:
    return {
        "variants": [
            row(per_seed, {"norm": norm, "data.batch_size": batch}, "best_val_acc")
            for norm, by_batch in accs.items()
            for batch, per_seed in by_batch.items()
        ]
    }


def test_f7_pass_and_fail() -> None:
    flat = {4: [0.965, 0.965, 0.965], 16: [0.97, 0.97], 64: [0.97, 0.97]}
    bn = {4: [0.89, 0.90, 0.91], 16: [0.95, 0.95], 64: [0.97, 0.97]}
    good = f7_report({"batchnorm": bn, "layernorm": flat, "rmsnorm": flat})
    v = by_id(decide_finding("f7", good))
    assert v["F7a"].status == v["F7b"].status == "PASS"
    gap = v["F7a"].intervals["batchnorm drop - layernorm drop"]
    # 0.07 - 0.005; se = 0.01 / sqrt(3) from the one noisy arm, t(0.975, df=2) = 4.303
    assert gap["effect"] == pytest.approx(0.065)
    assert gap["lo"] == pytest.approx(0.065 - 4.303 * 0.01 / 3**0.5, abs=1e-4)
    assert v["F7b"].intervals["layernorm b4 - b64"]["effect"] == pytest.approx(-0.005)

    # Two seeds a side with the same spread: t(0.975, 1) = 12.7 cannot resolve 0.02.
    two = {4: [0.97, 0.97], 64: [0.97, 0.97]}
    noisy = f7_report({"batchnorm": {4: [0.89, 0.91], 64: [0.97, 0.97]}, "layernorm": two,
                       "rmsnorm": two})  # fmt: skip
    v = by_id(decide_finding("f7", noisy))
    assert v["F7a"].status == "INCONCLUSIVE" and "seeds per arm would settle it" in v["F7a"].note

    # BatchNorm drops 0.01 while LayerNorm drops 0.05: both claims fail.
    bad = f7_report(
        {
            "batchnorm": {4: [0.96, 0.96], 16: [0.97, 0.97], 64: [0.97, 0.97]},
            "layernorm": {4: [0.92, 0.92], 16: [0.96, 0.96], 64: [0.97, 0.97]},
            "rmsnorm": flat,
        }
    )
    assert [x.status for x in decide_finding("f7", bad)] == ["FAIL", "FAIL"]

    # A diverged BatchNorm seed at batch 4 scores 0: with one other seed, a drop of 0.49 whose
    # interval (two seeds, 0 and 0.96) still straddles the margin.
    ends = {4: flat[4], 64: flat[64]}
    diverged = f7_report(
        {"batchnorm": {4: [None, 0.96], 64: [0.97, 0.97]}, "layernorm": ends, "rmsnorm": ends}
    )
    drop = by_id(decide_finding("f7", diverged))["F7a"].intervals["batchnorm drop - rmsnorm drop"]
    assert (
        drop["effect"] == pytest.approx(0.97 - 0.48 - 0.005) and drop["outcome"] == "INCONCLUSIVE"
    )
    assert {x.status for x in decide_finding("f7", {"variants": []})} == {"NO DATA"}


# --- F6: learning rates and QK-norm --------------------------------------------------------------
def write_run(path: Path, l0: float, logits: list[float], log_z: float = 0.0) -> str:
    """A run dir whose metrics.csv logs train/loss l0 at step 0, and attn/max_logit and
    logits/log_z (6.0 at step 0, then 6.0 + ``log_z``) every 10."""
    path.mkdir(parents=True)
    rows = ["step,train/loss,attn/max_logit,logits/log_z"]
    rows += [
        f"{10 * i},{l0 if i == 0 else ''},{x},{6.0 + (log_z if i else 0.0)}"
        for i, x in enumerate(logits)
    ]
    (path / "metrics.csv").write_text("\n".join(rows) + "\n")
    return str(path)


def f6_row(
    tmp: Path,
    lr: float,
    qk: bool,
    finals: list[float | None],
    peak: float,
    z: float | None = None,
    log_z: float = 0.0,
) -> dict:
    """One variant; final None = a diverged run; each run's logits rise to ``peak`` and its
    log Z moves by ``log_z``; ``z``: the z-loss arm, in sweeps that cross it."""
    runs = []
    for seed, final in enumerate(finals):
        attn = [peak / 4, peak, peak / 2]
        run_dir = write_run(tmp / f"{lr}-{qk}-{z}-{seed}", 4.6, attn, log_z)
        status = "diverged" if final is None else "completed"
        runs.append({"run_dir": run_dir, "seed": seed, "status": status, "final_val_loss": final})
    params = {"lr": lr, "model.qk_norm": qk} | ({} if z is None else {"optim.z_loss": z})
    return {"label": f"lr={lr} qk={qk} z={z}", "params": params, "runs": runs}


def f6_report(tmp: Path, arms: dict[bool, dict[float, tuple[list, float]]]) -> dict:
    rows = [
        f6_row(tmp, lr, qk, finals, peak)
        for qk, curve in arms.items()
        for lr, (finals, peak) in curve.items()
    ]
    return {"variants": rows}


def test_lr_sensitivity_is_wortsmans_definition() -> None:
    # mean over lrs of (loss - best loss): (1.0 + 0 + 0.5) / 3
    assert sensitivity({1e-3: 3.0, 1e-2: 2.0, 1e-1: 2.5}) == pytest.approx(0.5)
    assert sensitivity({1e-3: 2.0, 1e-2: 2.0}) == 0.0


def test_f6_pass_and_fail(tmp_path: Path) -> None:
    good = f6_report(
        tmp_path / "good",
        {
            # 1e-1: one seed diverged, one ended above the initial loss: both count at l0 = 4.6
            False: {1e-3: ([2.7, 2.7], 8.0), 1e-2: ([2.5, 2.5], 60.0), 1e-1: ([None, 5.0], 2000.0)},
            True: {1e-3: ([2.7, 2.7], 4.0), 1e-2: ([2.45, 2.45], 6.0), 1e-1: ([2.6, 2.6], 12.0)},
        },
    )
    v = by_id(decide_finding("f6", good))
    assert {k: x.status for k, x in v.items()} == dict.fromkeys(
        ("F6a", "F6b", "F6c", "F6d"), "PASS"
    )
    # 2000 / 8 = 250x and 12 / 4 = 3x over two decades of lr: 15.8x and 1.73x a decade,
    # against sqrt(10) = 3.16x (both seeds alike: the intervals are points)
    assert v["F6a"].intervals["growth per decade"]["effect"] == pytest.approx(250**0.5, rel=1e-3)
    assert v["F6b"].intervals["qk growth per decade"]["effect"] == pytest.approx(3**0.5, rel=1e-3)
    # 15x over 300x of lr (2.48 decades): 2.98x a decade, bounded; the same rise over one
    # decade is not.
    from analysis import stats
    from analysis.findings.lr import per_decade

    bound = v["F6b"].margins.logit_growth ** 0.5  # the claim's margin, a decade of lr
    assert bound == pytest.approx(10**0.5)
    rise = stats.ratio_interval([15.0, 15.0], [1.0, 1.0])
    assert per_decade(rise, [1e-3, 3e-1]).effect < bound
    assert per_decade(rise, [1e-3, 1e-2]).effect > bound
    gap = v["F6c"].intervals["no-qk - qk"]
    assert gap["effect"] == pytest.approx(((2.5 - 2.45) + (4.6 - 2.6)) / 2)
    assert v["F6d"].measured["no_qk"] == pytest.approx((0.2 + 0 + 2.1) / 3, abs=1e-4)
    assert v["F6d"].measured["qk"] == pytest.approx((0.25 + 0 + 0.15) / 3, abs=1e-4)

    # QK-norm changes nothing, and the unnormed logits rise only 5x.
    same = {1e-3: ([2.7, 2.7], 8.0), 1e-2: ([2.5, 2.5], 20.0), 1e-1: ([2.9, 2.9], 40.0)}
    bad = by_id(decide_finding("f6", f6_report(tmp_path / "bad", {False: same, True: same})))
    assert {k: x.status for k, x in bad.items()} == dict.fromkeys(bad, "FAIL")
    assert bad["F6d"].intervals["sensitivity no-qk - qk"]["effect"] == 0.0

    # One seed per variant, or no metrics.csv: no verdict.
    one_seed = f6_report(tmp_path / "one", {qk: {1e-3: ([2.7], 8.0)} for qk in (False, True)})
    assert {x.status for x in decide_finding("f6", one_seed)} == {"NO DATA"}
    for variant_row in good["variants"]:
        for run in variant_row["runs"]:
            (Path(run["run_dir"]) / "metrics.csv").unlink()
    assert {x.status for x in decide_finding("f6", good)} == {"NO DATA"}


def test_f13_reads_the_arms_of_wortsmans_figure_1(tmp_path: Path) -> None:
    lrs = (1e-3, 1e-2, 1e-1, 1.0)
    curves = {  # (qk, z) -> final loss per lr, both seeds alike; None: diverged (counts at 4.6)
        (False, 0.0): (3.0, 2.5, 3.2, None),
        (True, 0.0): (3.0, 2.48, 2.6, 3.0),
        (False, 1e-4): (3.0, 2.5, 3.2, None),  # z-loss alone changes nothing here
        (True, 1e-4): (2.55, 2.45, 2.5, 2.54),
    }

    def report(drift: float, curves: dict = curves) -> dict:  # log Z moves by ``drift``
        where = tmp_path / f"{drift}-{len(str(curves))}"
        rows = [
            f6_row(where, lr, qk, [x, x], 8.0, z, drift)
            for (qk, z), xs in curves.items()
            for lr, x in zip(lrs, xs, strict=True)
        ]
        return {"variants": rows}

    drifting = report(-5.0)
    v = by_id(decide_finding("f13", drifting))
    assert [v[c].status for c in ("F13a", "F13b", "F13c")] == ["PASS", "PASS", "PASS"]
    # F13b compares qk with qk + z-loss: (0.52 + 0 + 0.12 + 0.52) / 4 - (0.1 + 0 + 0.05 + 0.09) / 4
    assert v["F13b"].intervals["sensitivity none - with"]["effect"] == pytest.approx(0.29 - 0.06)
    # Wortsman's sensitivity: mean over lrs of loss - best; the diverged lr at l0 = 4.6.
    assert v["F13a"].measured["none"]["sensitivity"] == pytest.approx((0.5 + 0 + 0.7 + 2.1) / 4)
    assert v["F13a"].measured["with"]["sensitivity"] == pytest.approx((0.52 + 0 + 0.12 + 0.52) / 4)
    assert v["F13a"].intervals["best with - none"]["effect"] == pytest.approx(-0.02)
    inert = {**curves, (True, 1e-4): curves[(True, 0.0)]}  # z-loss changes nothing on qk
    moved = by_id(decide_finding("f13", report(-5.0, inert)))["F13b"]
    gap = "sensitivity none - with"
    assert moved.status == "FAIL" and moved.intervals[gap]["effect"] == 0.0  # log Z fell 5 nats
    # log Z rose 0.3 nats: z-loss had nothing to act on, so F13b cannot be tested here.
    still = by_id(decide_finding("f13", report(0.3, inert)))["F13b"]
    assert still.status == "NOT TESTABLE" and still.intervals[gap]["effect"] == 0.0
    assert still.note.startswith(
        "NOT TESTABLE AT THIS SIZE: without z-loss log Z fell at most 0.00 nats below its "
        "end-of-warmup value at lr 1 (it rose up to 0.30"
    )
    # Both: every lr within 0.1 of 2.45, a 1000x span; without: only the best lr (1x).
    assert v["F13c"].intervals["span with both"]["effect"] == pytest.approx(1000)
    assert v["F13c"].intervals["span both / none"]["effect"] == pytest.approx(1000)
    # F6 reads the arms without z-loss of the same sweep.
    f6 = by_id(decide_finding("f6", drifting))
    assert f6["F6d"].status == "PASS" and f6["F6d"].measured["no_qk"] == pytest.approx(0.825)


def test_a_verdict_at_one_fixed_rate_says_so_with_what_the_other_rates_show():
    from analysis.findings.common import Verdict, note_lrs, variant

    report = {"variants": [row([2.0, 2.2], placement="post", lr=1e-3),
                           row([2.5, 2.5], placement="post", lr=3e-3),
                           row([None, 3.0], placement="post", lr=1e-2)]}  # fmt: skip
    variant(report, placement="post", lr=1e-3)
    v = note_lrs(Verdict("X", "a claim", "a paper"), {}, report["fixed_lrs"])
    assert v.measured["fixed_lr"] == {"post": 1e-3}
    assert "decided at one fixed lr" in v.note
    assert "post: 0.001 2.100 (used), 0.003 2.500, 0.01 diverged" in v.note
    # a claim that reads the curve (several rates of one variant) is not "at a fixed rate"
    report.pop("fixed_lrs")
    for lr in (1e-3, 1e-2):
        variant(report, placement="post", lr=lr)
    assert "fixed" not in note_lrs(Verdict("Y", "", ""), {}, report["fixed_lrs"]).note
