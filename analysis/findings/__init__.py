"""Findings as code: each reproduction's published claims, decided PASS / FAIL / INCONCLUSIVE /
NOT TESTABLE / NO DATA from a sweep's report.json. registry.py lists them, decide.py decides
them; common.py holds what every check shares (analysis/stats.py the intervals); the checks live
in one module per family (init: F1, depth: F2-F4 and the placement
studies, norms: F5 and F7, lr: F6 and F13, stability: F8, F10, F12).
"""

from analysis.findings.common import VERDICTS, NoData, Verdict
from analysis.findings.decide import decide_finding
from analysis.findings.registry import ALIASES, FINDINGS, Claim, Finding

__all__ = [
    "ALIASES",
    "FINDINGS",
    "VERDICTS",
    "Claim",
    "Finding",
    "NoData",
    "Verdict",
    "decide_finding",
]
