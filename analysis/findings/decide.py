"""Deciding a finding: every claim of it checked on a sweep's report, each verdict noting the
rates its variants were taken at (analysis/findings/common.py: note_lrs)."""

from __future__ import annotations

from pathlib import Path

from analysis.findings.common import NoData, Verdict, note_lrs
from analysis.findings.registry import ALIASES, FINDINGS
from analysis.findings.settings import ReproduceConfig


def decide_finding(
    finding: str, report: dict, reproduce: ReproduceConfig | None = None
) -> list[Verdict]:
    """Every claim of ``finding`` decided on ``report``; ``reproduce``: the experiment's
    ``reproduce`` node and run settings (analysis/findings/settings.py)."""
    reproduce = reproduce or ReproduceConfig()
    out = []
    for claim in FINDINGS[ALIASES.get(finding, finding)].claims:
        v = Verdict(claim.id, claim.statement, claim.source, margins=claim.margins)
        report["chosen_lrs"] = {}  # filled by variant() when it takes a variant at its best lr
        report["fixed_lrs"] = {}  # ... and when a claim names its lr: what the other lrs show
        report["confirm_seeds"] = reproduce.confirm.seeds if reproduce.confirm else []
        report["baseline"] = reproduce.baseline  # what an arm's key is elsewhere
        report["arms_read"] = []  # filled by variant(): the arms the claim compares
        try:
            v = note_lrs(
                claim.check(report, reproduce, v), report["chosen_lrs"], report["fixed_lrs"]
            )
            v = gate_untrained(v, report["arms_read"])
        except NoData as err:
            v.status, v.note = "NO DATA", str(err)
        out.append(v)
    report.pop("chosen_lrs", None)
    report.pop("fixed_lrs", None)
    report.pop("confirm_seeds", None)
    report.pop("baseline", None)
    report.pop("arms_read", None)
    return out


def untrained(row: dict) -> bool:
    """An arm that did not train: it has completed runs and none of them left the plateau
    (each one's ``did_not_train``); its diverged runs, if any, learned nothing either."""
    done = [r for r in row["runs"] if r["status"] == "completed"]
    return bool(done) and all(r.get("did_not_train") for r in done)


def gate_untrained(verdict: Verdict, arms: list[dict]) -> Verdict:
    """The one rule for every claim, decided before and whatever its outcome: when none of the
    arms a claim compares trained (each ended at the plateau, e.g. a run too short), the
    comparison is between plateaus and the claim is NOT TESTABLE, naming the runs. One arm
    that stalls while another trains is a result (F2's Post-LN without warmup), not a gate."""
    if not arms or verdict.status == "NO DATA" or not all(untrained(a) for a in arms):
        return verdict
    names = sorted({a["label"] for a in arms})
    runs = [Path(r["run_dir"]).name for a in arms for r in a["runs"] if r.get("did_not_train")]
    shown = ", ".join(runs[:4]) + (f" and {len(runs) - 4} more" if runs[4:] else "")
    why = next(r["did_not_train"] for a in arms for r in a["runs"] if r.get("did_not_train"))
    said = (
        f"no arm trained ({'; '.join(names)}: every completed run did not train, e.g. {why}; "
        f"runs {shown}); train longer (trainer.max_steps) so the best arm leaves the plateau"
    )
    verdict.measured["before_gate"] = verdict.status
    verdict.status, verdict.note = "NOT TESTABLE", said
    return verdict
