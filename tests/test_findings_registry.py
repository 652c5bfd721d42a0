"""The registry as declared data (analysis/findings/registry.py): every claim well formed, its
rule's text written from its fields, its hash moved by any change to them, and the per-run
measures it names read from a run dir (analysis/findings/measures.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from analysis.findings import FINDINGS, decide_finding, wanted
from analysis.findings.declare import (
    ESTIMANDS,
    Part,
    claim_hash,
    part_text,
    registry_hash,
    rule_text,
)
from analysis.findings.measures import MEASURES, PROBE_MEASURES
from analysis.findings.settings import ReproduceConfig


def test_every_claim_is_declared_in_full() -> None:
    ids = [c.id for f in FINDINGS.values() for c in f.claims]
    assert len(ids) == len(set(ids))
    for finding in FINDINGS.values():
        for claim in finding.claims:
            parts = list(claim.parts) + (
                [claim.gate.part] if claim.gate and claim.gate.part else []
            )
            for part in parts:
                assert part.estimand in ESTIMANDS
                assert part.measure in MEASURES or part.measure in PROBE_MEASURES, claim.id
            assert claim.seeds >= 5 and claim.source and claim.statement
            names = [part_text(p) for p in claim.parts]  # each effect's name in the verdict
            assert len(set(names)) == len(names), claim.id
            text = rule_text(claim)
            for part in claim.parts:  # the margin a verdict is decided by is in its text
                assert f"{part.margin:g}" in text, (claim.id, text)


def test_the_review_found_claims_are_as_fixed() -> None:
    claims = {c.id: c for f in FINDINGS.values() for c in f.claims}
    assert not claims["F1c"].counted  # true by construction: a check, not evidence
    assert "F6d" not in claims  # F13a's interval, counted once
    assert claims["F1a"].parts[0].side == "below"  # Theorem 1's one-sided bound
    assert claims["F2b"].parts[0].estimand == "paired"  # arms share init and batch order
    assert claims["F12c"].parts[0].estimand == "paired" and claims["F12c"].gate
    assert (
        claims["F2a"].parts[0].estimand == "pairs" and claims["F10b"].parts[0].estimand == "every"
    )
    for cid in ("P3", "P5"):
        assert claims[cid].parts[0].estimand == "rate"
    assert all(p.estimand.startswith("ratio") for c in ("V1", "V2") for p in claims[c].parts)


def test_a_change_to_a_claim_changes_its_hash() -> None:
    claim = FINDINGS["f2"].claims[1]
    moved = dataclasses.replace(claim, parts=(dataclasses.replace(claim.parts[0], margin=0.06),))
    assert claim_hash(moved) != claim_hash(claim)
    assert claim_hash(dataclasses.replace(claim, seeds=claim.seeds + 1)) != claim_hash(claim)
    assert claim_hash(dataclasses.replace(claim)) == claim_hash(claim)
    changed = {**FINDINGS, "f2": dataclasses.replace(FINDINGS["f2"], claims=(moved,))}
    assert registry_hash(changed) != registry_hash(FINDINGS)


def test_a_declaration_refuses_a_malformed_part() -> None:
    with pytest.raises(ValueError, match="reads 2 arm"):
        Part("diff", ({"placement": "post"},), 0.1, "above")
    with pytest.raises(ValueError, match="event"):
        Part("rate", ({"placement": "post"},), 0.5, "above", event="lucky")


def write_run(run: Path, metrics: str, summary: dict) -> None:
    run.mkdir(parents=True)
    (run / "metrics.csv").write_text(metrics)
    (run / "summary.json").write_text(json.dumps(summary))


def test_the_probe_measures_are_read_from_each_run_dir(tmp_path: Path) -> None:
    """One run's metrics.csv by hand: log Z after warmup 50 is 2.0, 2.5, 0.5 (fell 1.5, lowest
    0.5, last |log Z| 0.5), the max logit peaks at 40, update/model over the first
    5% of 400 steps (steps 5..20) averages 0.2."""
    lines = ["step,logits/log_z,attn/max_logit,update/model,train/loss"]
    lines += ["0,3.0,10,,4.2", "5,,,0.1,", "20,,,0.3,", "40,2.8,,,", "50,2.0,40,,"]
    lines += ["100,2.5,30,0.9,", "200,0.5,20,,2.1"]
    write_run(tmp_path / "r0", "\n".join(lines) + "\n",
              {"status": "completed", "best_val_loss": 2.0, "unigram_loss": 3.25})  # fmt: skip
    run = {"run_dir": str(tmp_path / "r0"), "seed": 0, "status": "completed",
           "best_val_loss": 2.0, "final_val_loss": 2.1, "did_not_train": None}  # fmt: skip
    report = {"variants": [{"params": {"placement": "pre", "lr": 0.3}, "runs": [run]}]}
    settings = ReproduceConfig(warmup_steps=50, max_steps=400)
    table, _ = decide_finding("f12", report, settings)
    (row,) = table["rows"]
    assert row["values"]["log_z_fall"] == pytest.approx(1.5)
    assert row["values"]["log_z_min"] == pytest.approx(0.5)
    assert row["values"]["final_abs_log_z"] == pytest.approx(0.5)
    table, _ = decide_finding("f3", report, settings)
    assert table["rows"][0]["values"]["early_update"] == pytest.approx(0.2)
    table, _ = decide_finding("f6", report, settings)
    assert table["rows"][0]["values"]["peak_logit"] == 40
    table, _ = decide_finding("f13", report, settings)
    assert table["rows"][0]["values"]["first_train_loss"] == pytest.approx(4.2)
    table, _ = decide_finding("placements", report, settings)
    assert table["rows"][0]["values"]["unigram_gap"] == pytest.approx(1.25)


def test_a_failed_run_is_no_row_and_a_diverged_one_has_no_loss() -> None:
    runs = [
        {"run_dir": "-", "seed": 0, "status": "failed", "best_val_loss": None},
        {"run_dir": "-", "seed": 1, "status": "diverged", "best_val_loss": None},
        {"run_dir": "-", "seed": 2, "status": "completed", "best_val_loss": 3.2,
         "did_not_train": "ended at 3.2, within 0.1 of the unigram loss 3.25"},
    ]  # fmt: skip
    report = {"variants": [{"params": {"placement": "post"}, "runs": runs}]}
    table, _ = decide_finding("f5", report)
    assert table["left_out"] == {"failed": 1}
    assert [(r["seed"], r["outcome"], r["values"]["best_val_loss"]) for r in table["rows"]] == [
        (1, "diverged", None), (2, "stalled", 3.2)
    ]  # fmt: skip


def test_each_finding_reads_only_the_measures_it_names() -> None:
    assert wanted(FINDINGS["f1"]) == set(PROBE_MEASURES)
    assert {"final_val_loss", "first_train_loss", "log_z_fall"} <= wanted(FINDINGS["f13"])
    assert "peak_logit" not in wanted(FINDINGS["f2"])


def test_each_findings_readme_shows_the_registry_as_it_is() -> None:
    """The claims' rules, seeds and ledgers in docs/findings/*/README.md are written from the
    registry (scripts/findings_docs.py): a changed claim without its README rewritten fails."""
    from scripts import findings_docs

    assert findings_docs.main(["--check"]) == 0


def test_a_claim_changed_after_the_freeze_is_in_its_ledger() -> None:
    """analysis/findings/frozen.json holds each claim's hash at its freeze: a claim whose
    declaration moved since must say so in docs/findings/ledger.json (an entry carrying its new
    hash), and is exploratory until it is frozen again."""
    root = Path(__file__).resolve().parents[1]
    path = root / "analysis" / "findings" / "frozen.json"
    if not path.is_file():
        pytest.skip("the registry is not frozen in this checkout")
    frozen = json.loads(path.read_text())["claims"]
    ledger = json.loads((root / "docs" / "findings" / "ledger.json").read_text())["entries"]
    logged = {(e["claim"], e.get("hash")) for e in ledger}
    for finding in FINDINGS.values():
        for claim in finding.claims:
            entry = frozen.get(claim.id)
            if entry and entry["hash"] != claim_hash(claim):
                assert (claim.id, claim_hash(claim)) in logged, f"{claim.id}: add its ledger entry"


def test_f18s_spike_measures_by_hand():
    """first_spike: OLMo-core's 6-sigma rule over the previous 128 values, from the 64th held;
    update_lead: the loss's first spike step minus the update norm's."""
    from analysis.findings.measures import Context, first_spike, update_lead

    flat = [(s, 1.0 + 0.01 * (s % 2)) for s in range(100)]
    assert first_spike(flat) is None
    assert first_spike([*flat[:70], (70, 9.0), *flat[71:]]) == 70
    assert first_spike([(s, 1.0 + 0.01 * (s % 2)) for s in range(10)] + [(10, 9.0)]) is None
    c = Context({"run_dir": "unused"}, 12, {"max_steps": 100})
    c.metrics = {
        "spike/loss_z": [(s, 0.5) for s in range(64, 80)] + [(80, 7.0)],
        "adam/update/total": [*flat[:75], (75, 50.0), *flat[76:]],
    }
    assert update_lead(c) == 5.0  # the update spiked at 75, the loss at 80
    c.metrics["adam/update/total"] = flat  # the update never spiked: the loss step - the end
    assert update_lead(c) == -20.0
    c.metrics["spike/loss_z"] = [(s, 0.5) for s in range(64, 100)]
    assert update_lead(c) is None  # no loss spike: the run says nothing


def test_norm_saturation_is_the_mean_over_layers_at_the_last_probe():
    from analysis.findings.measures import Context, norm_saturation

    c = Context({"run_dir": "unused"}, 2, {"max_steps": 100})
    c.metrics = {
        "saturation/norm/layer_0": [(0, 0.0), (50, 0.1), (100, 0.2)],
        "saturation/norm/layer_1": [(0, 0.0), (100, 0.4)],
    }
    assert norm_saturation(c) == pytest.approx(0.3)  # (0.2 + 0.4) / 2
    c.metrics = {"saturation/norm/layer_0": [(0, 0.5)]}  # one layer never logged: no value
    assert norm_saturation(c) is None


def test_every_arm_key_names_a_field_its_runs_have() -> None:
    """An arm's key is a report param (analysis.runs.CANONICAL) or a config key of its
    experiment: a key the runs lack matches every run (select.matching reads an absent key as
    "not varied"), so F20's first ``max_steps`` pooled both budgets into each arm."""
    from omegaconf import OmegaConf

    from analysis.runs import CANONICAL
    from experiments.sweep import compose

    missing, composed = object(), {}
    for name, finding in FINDINGS.items():
        parts = [p for c in finding.claims for p in c.parts]
        parts += [c.gate.part for c in finding.claims if c.gate and c.gate.part]
        for arm in {json.dumps(a, sort_keys=True, default=str) for p in parts for a in p.arms}:
            arm = json.loads(arm)
            groups = [
                f"{k}={arm[k]}"
                for k in ("model", "placement", "norm", "param")
                if str(arm.get(k, "")).isidentifier()
            ]  # fmt: skip  (not EACH's <each>)
            where = (finding.experiment, *groups)  # arms sharing their groups share one config
            if where not in composed:
                composed[where] = compose(finding.experiment, groups)
            cfg = composed[where]
            for key in arm:
                found = OmegaConf.select(cfg, key, default=missing) is not missing
                assert key in CANONICAL or found, f"{name}: arm key {key!r} is no run field"
