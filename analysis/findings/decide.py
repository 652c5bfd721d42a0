"""Deciding a finding: every claim of it checked on a sweep's report, each verdict noting the
rates its variants were taken at (analysis/findings/common.py: note_lrs)."""

from __future__ import annotations

from analysis.findings.common import NoData, Verdict, gate_untrained, note_lrs
from analysis.findings.registry import ALIASES, FINDINGS


def evaluate(finding: str, report: dict, settings: dict | None = None) -> list[Verdict]:
    """Every claim of ``finding`` decided on ``report``; ``settings``: the experiment's
    ``reproduce`` node plus ``max_steps``."""
    settings = settings or {}
    out = []
    for claim in FINDINGS[ALIASES.get(finding, finding)].claims:
        v = Verdict(claim.id, claim.statement, claim.source, margins=claim.margins)
        report["chosen_lrs"] = {}  # filled by variant() when it takes a variant at its best lr
        report["fixed_lrs"] = {}  # ... and when a claim names its lr: what the other lrs show
        report["confirm_seeds"] = (settings.get("confirm") or {}).get("seeds", [])
        report["baseline"] = settings.get("baseline") or {}  # what an arm's key is elsewhere
        report["arms_read"] = []  # filled by variant(): the arms the claim compares
        try:
            v = note_lrs(
                claim.check(report, settings, v), report["chosen_lrs"], report["fixed_lrs"]
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
