"""What every claim check shares: the verdict record, the NO DATA signal, and reading variant
rows of a sweep's report.json (analysis/report.py writes it).

A claim states what a paper reports, measures it in the report (the variants: each run's best
val loss, per seed; or the init-probe groups), compares it with a threshold and says PASS or
FAIL, or NO DATA when the variants it needs are missing or have fewer than MIN_SEEDS finished
runs, or NOT TESTABLE when the measured runs show that this size cannot produce what the claim is
about (the measured reason is in the verdict).

A claim that compares arms over seeds decides on the 95% confidence interval of its effect
(analysis/stats.py: Welch t over seeds): PASS when the interval lies on the claim's side of its
margin, FAIL when it lies on the other side, INCONCLUSIVE when it straddles the margin, with the
seeds per arm the observed spread would need (``decide_interval``, ``decide_all``). The verdict
records the effect, its interval, the margin and the seeds (``Verdict.intervals``).

Each variant at its own best learning rate (Wortsman et al. 2023): in a sweep with ``optim.lr``
in its grid, ``variant(report, placement="post")`` (no ``lr`` given) is the post row at the lr
whose mean best val loss is lowest, and the verdict records that lr (``best_lr``) and says so
when it is the smallest or largest swept (the variant's best may lie outside the grid). A claim
about one fixed rate passes ``lr=`` itself.

Select, then confirm: an experiment with ``reproduce.confirm`` (``seeds``: fresh seeds, ``by``:
the variant params each confirmation fixes) chooses each variant's best rate on the grid's seeds
only, then compares the variants on the confirming seeds run at that rate (scripts/reproduce.py
launches them once the grid has finished), so the rate is never chosen on the same noise that
decides the claim; a row read at a named rate (``lr=``) holds the grid's seeds only.
``evaluate`` puts the confirming seeds in report["confirm_seeds"].

Verdicts use finished runs only, those that completed or diverged (runs.FINISHED): a failed
run (a config error, a crash, a refused resume) says nothing about its variant and is left out,
never read as a divergence. A diverged run scores +inf: it counts as worse than any run that
trained, and a variant with one such seed is as bad as its worst seed.

Each claim's margins come from its registry entry (analysis/findings/claims.py: the table of
margins and why each has its value), in ``Verdict.margins``.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from analysis import stats
from analysis.runs import finite
from analysis.variants import grid_seeds
from runs.record import FINISHED

MIN_SEEDS = 2
VERDICTS = ("PASS", "FAIL", "INCONCLUSIVE", "NOT TESTABLE", "NO DATA")
SIDE_TEXT = {"above": ">= {m:g}", "below": "<= {m:g}", "within": "within ±{m:g}"}
UNTESTABLE = "NOT TESTABLE AT THIS SIZE"


class Margins(dict):
    """A claim's margins by name, read as attributes (``v.margins.fails``); a name its registry
    entry does not declare is an error that says where to declare it."""

    def __getattr__(self, name: str) -> float:
        if name not in self:
            raise AttributeError(
                f"margin {name!r} is not declared by this claim: add it to the claim's margins "
                "in its registry entry (analysis/findings/registry.py, registry_probes.py)"
            )
        return self[name]


@dataclass
class Verdict:
    id: str
    statement: str  # the paper's claim, as this sweep tests it
    source: str
    measured: dict[str, Any] = field(default_factory=dict)
    threshold: str = ""
    status: str = "NO DATA"
    note: str = ""
    # effect name -> {effect, lo, hi, n, method, margin, side, outcome[, seeds_needed]}
    intervals: dict[str, dict[str, Any]] = field(default_factory=dict)
    margins: Margins = field(default_factory=lambda: Margins())  # the claim's, by name

    def __post_init__(self) -> None:
        self.margins = Margins(self.margins)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class NoData(Exception):
    """The report lacks what a claim needs; the message says what."""


def untestable(verdict: Verdict, reason: str, **measured: Any) -> Verdict:
    """NOT TESTABLE: the runs show this size cannot produce what the claim is about; ``reason``
    says what was measured and what size would test it."""
    measure(verdict, **measured)
    verdict.status, verdict.note = "NOT TESTABLE", f"{UNTESTABLE}: {reason}"
    return verdict


# --- reading the report --------------------------------------------------------------------------
def close(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=1e-6)
    return a == b


def matching(rows: list[dict], params: dict[str, Any], baseline: dict[str, Any]) -> list[dict]:
    """The rows whose params match ``params``, and ``baseline``'s value for each key of it that
    ``params`` does not name and the row has (an experiment's ``reproduce.baseline``: the value
    of a key its arms vary that the grid's claims are about, e.g. warmup_steps: 0)."""
    pinned = {k: v for k, v in baseline.items() if k not in params}
    return [
        r
        for r in rows
        if all(close(r["params"].get(k), v) for k, v in params.items())
        and all(k not in r["params"] or close(r["params"][k], v) for k, v in pinned.items())
    ]


def variant(report: dict, **params: Any) -> dict:
    """The one variant row whose params match ``params`` (and the experiment's baseline); in a
    learning-rate sweep without ``lr`` in ``params``, the matching row at its best lr
    (at_best_lr)."""
    rows = matching(report.get("variants", []), params, report.get("baseline") or {})
    lrs = [r["params"].get("lr") for r in rows]
    if len(rows) > 1 and "lr" not in params and len(set(lrs)) == len(rows):
        return read(report, at_best_lr(report, rows, params))
    if len(rows) != 1:
        what = " ".join(f"{k}={v}" for k, v in params.items())
        raise NoData(f"{len(rows)} variants match {what} (need exactly 1)")
    if "lr" in params:
        note_fixed_lr(report, params)
        # a row read at a named rate holds the grid's seeds only: the confirming seeds are one
        # rate's, and pooling them there would weigh that rate against the others
        return read(report, seed_subset(rows[0], set(report.get("confirm_seeds") or ()), False))
    return read(report, rows[0])


def read(report: dict, row: dict) -> dict:
    """``row`` as an arm the claim being decided reads (kept for the did-not-train gate)."""
    report.setdefault("arms_read", []).append(row)
    return row


def note_fixed_lr(report: dict, params: dict[str, Any]) -> None:
    """A claim about one fixed rate took this row at ``params["lr"]``: keep, for its verdict,
    the variant's mean score at every swept lr (report["fixed_lrs"]), so the verdict says which
    rate it was decided at and what the other rates show."""
    others = {k: v for k, v in params.items() if k != "lr"}
    rows = matching(report.get("variants", []), others, report.get("baseline") or {})
    by_lr = {}
    for r in sorted(rows, key=lambda r: r["params"].get("lr") or 0):
        found = scores(r)
        if found and r["params"].get("lr") is not None:
            by_lr[r["params"]["lr"]] = math.inf if math.inf in found else statistics.fmean(found)
    if len(by_lr) > 1:
        name = "-".join(short(k, v) for k, v in others.items()) or "all"
        entry = report.setdefault("fixed_lrs", {}).setdefault(name, {"used": [], "by_lr": by_lr})
        if params["lr"] not in entry["used"]:
            entry["used"].append(params["lr"])


def at_best_lr(report: dict, rows: list[dict], params: dict[str, Any]) -> dict:
    """The row (one per lr) with the lowest mean best val loss over the grid's seeds (those run at
    more than one rate: an arm's or a confirming seed never enters the choice), a diverged seed
    counting as +inf; noted in report["chosen_lrs"] for the verdict."""
    confirm = set(report.get("confirm_seeds") or ())
    chosen_lr = best_row([seed_subset(r, confirm, False) for r in on_grid(rows)])["params"]["lr"]
    row = next(r for r in rows if r["params"]["lr"] == chosen_lr)
    best = seed_subset(row, confirm, False)  # every non-confirming run at that rate
    lrs = sorted(r["params"]["lr"] for r in rows)
    chosen = {
        "variant": "-".join(short(k, v) for k, v in params.items()) or "all",
        "best_lr": best["params"]["lr"],
        "lrs": lrs,
        "edge": best["params"]["lr"] in (lrs[0], lrs[-1]),
    }
    report.setdefault("chosen_lrs", {})[chosen["variant"]] = chosen
    if not confirm:
        return best
    fresh = seed_subset(row, confirm, True)
    chosen["confirm_seeds"] = len(finished_runs(fresh))
    if chosen["confirm_seeds"] < MIN_SEEDS:
        raise NoData(
            f"{row['label']}: {chosen['confirm_seeds']} confirming runs at its best lr "
            f"{best['params']['lr']:g}; run the reproduce command again to launch them"
        )
    return fresh


def on_grid(rows: list[dict]) -> list[dict]:
    """The rows (one per lr) with only the grid's seeds' runs (variants.grid_seeds)."""
    grid = grid_seeds([[r.get("seed") for r in row["runs"]] for row in rows])
    return [{**row, "runs": [r for r in row["runs"] if str(r.get("seed")) in grid]} for row in rows]


def best_row(rows: list[dict]) -> dict:
    """The row (one per lr) with the lowest mean best val loss over enough finished seeds."""
    scored = []
    for row in rows:
        found = scores(row)
        if len(found) >= MIN_SEEDS:
            scored.append((math.inf if math.inf in found else statistics.fmean(found), row))
    if not scored:
        raise too_few(rows[0], 0, "learning rates with enough finished runs")
    return min(scored, key=lambda x: (x[0], x[1]["params"]["lr"]))[1]


def seed_subset(row: dict, seeds: set, inside: bool) -> dict:
    """The row with only the runs whose seed is (``inside``) or is not in ``seeds``."""
    return {**row, "runs": [r for r in row["runs"] if (r.get("seed") in seeds) == inside]}


def confirm_at(
    report: dict, by: list[str], seeds: list, baseline: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Each variant's params (the ``by`` keys; at the ``baseline``'s values of the keys an arm
    varies) with its best lr chosen on the grid's seeds (those not in ``seeds``): what the
    confirming runs fix."""
    variants = matching(report.get("variants", []), {}, baseline or {})
    groups = {tuple(r["params"].get(k) for k in by) for r in variants}
    out = []
    for key in sorted(groups, key=str):
        params = dict(zip(by, key, strict=True))
        rows = [seed_subset(r, set(seeds), False) for r in matching(variants, params, {})]
        if len({r["params"].get("lr") for r in rows}) == len(rows) > 1:
            out.append({**params, "lr": best_row(on_grid(rows))["params"]["lr"]})
    return out


def short(key: str, value: Any) -> str:
    """A variant param as a verdict names it: post, L12, z_loss=0.0001."""
    if isinstance(value, str):
        return value
    return f"L{value}" if key == "n_layer" else f"{key.split('.')[-1]}={value}"


def note_lrs(verdict: Verdict, chosen: dict[str, dict], fixed: dict | None = None) -> Verdict:
    """Record in the verdict the best lr each variant it compared was taken at, and say which
    sit at an edge of the grid; for a claim decided at a fixed rate, that rate and each
    variant's mean best val loss at every swept rate (``fixed``: report["fixed_lrs"])."""
    # a variant read at exactly one of its swept rates (a claim that reads the whole curve is
    # about every rate, and says so in its own measures)
    fixed = {k: f for k, f in (fixed or {}).items() if len(f["used"]) == 1}
    if fixed:
        verdict.measured["fixed_lr"] = {k: f["used"][0] for k, f in fixed.items()}
        shown = "; ".join(
            f"{k}: " + ", ".join(
                f"{lr:g} {'diverged' if math.isinf(x) else f'{x:.3f}'}"
                + (" (used)" if close(lr, f["used"][0]) else "")
                for lr, x in f["by_lr"].items()
            )
            for k, f in fixed.items()
        )  # fmt: skip
        said = f"decided at one fixed lr (the claim is about that rate); every swept lr: {shown}"
        verdict.note = "; ".join(x for x in (verdict.note, said) if x)
    if not chosen:
        return verdict
    verdict.measured["best_lr"] = {k: c["best_lr"] for k, c in chosen.items()}
    confirmed = {k: c["confirm_seeds"] for k, c in chosen.items() if "confirm_seeds" in c}
    if confirmed:
        verdict.measured["confirm_seeds"] = confirmed
        said = "best lr chosen on the grid's seeds, compared on fresh seeds at that lr"
        verdict.note = "; ".join(x for x in (verdict.note, said) if x)
    edges = [
        f"{k} ({c['best_lr']:g} of {min(c['lrs']):g}..{max(c['lrs']):g})"
        for k, c in chosen.items()
        if c["edge"]
    ]
    if edges:
        said = f"best lr at an edge of its grid for {', '.join(edges)}: its best may lie outside"
        verdict.note = "; ".join(x for x in (verdict.note, said) if x)
    return verdict


def finished_runs(row: dict) -> list[dict]:
    """The runs a verdict may use: those that completed or diverged."""
    return [r for r in row["runs"] if r["status"] in FINISHED]


def too_few(row: dict, n: int, what: str = "completed or diverged runs") -> NoData:
    """NO DATA for a variant with ``n`` usable runs; names the runs left out and why."""
    left = Counter(r["status"] for r in row["runs"] if r["status"] not in FINISHED)
    blind = sum(r["status"] == "completed" and not scored(r) for r in row["runs"])
    parts = [f"{k} {s}" for s, k in sorted(left.items())]
    parts += [f"{blind} completed without a validation loss"] if blind else []
    out = f" ({', '.join(parts)} left out)" if parts else ""
    return NoData(f"{row['label']}: {n} {what}{out}, need >= {MIN_SEEDS}")


def scored(run: dict, metric: str = "best_val_loss") -> bool:
    """Whether a completed run has ``metric`` (one trained without validation has none)."""
    return finite(run.get(metric)) is not None


def scores(row: dict, metric: str = "best_val_loss") -> list[float]:
    """Per finished run: its metric, +inf when it diverged; other runs left out, and so is a
    completed run without the metric (no validation ran: no data, never a divergence)."""
    out = []
    for run in finished_runs(row):
        if run["status"] != "completed":
            out.append(math.inf)
        elif scored(run, metric):
            out.append(float(run[metric]))
    return out


RunMeasure = Callable[[dict, int], float | None]  # (report run record, n_layer) -> value


def per_seed(row: dict, measure: RunMeasure, what: str) -> list[float]:
    """``measure`` of each of the variant's finished runs, one value a seed (runs without it
    left out); NO DATA under MIN_SEEDS values."""
    found = [
        x
        for r in finished_runs(row)
        if (x := measure(r, int(row["params"].get("n_layer") or 0))) is not None
    ]
    if len(found) < MIN_SEEDS:
        raise too_few(row, len(found), f"finished runs with {what} logged")
    return found


def enough_scores(row: dict, min_seeds: int = MIN_SEEDS) -> list[float]:
    """scores(row), or NO DATA under ``min_seeds`` finished runs."""
    values = scores(row)
    if len(values) < min_seeds:
        raise too_few(row, len(values))
    return values


def mean_score(row: dict, min_seeds: int = MIN_SEEDS) -> float:
    values = enough_scores(row, min_seeds)
    return math.inf if math.inf in values else statistics.fmean(values)


def values(report: dict, key: str) -> list[Any]:
    """The distinct values of one variant param across the report, sorted."""
    found = {r["params"].get(key) for r in report.get("variants", [])} - {None}
    return sorted(found)


def rnd(x: float | None, digits: int = 4) -> float | str | None:
    if x is None:
        return None
    return "inf (diverged)" if math.isinf(x) else round(x, digits)


def measure(verdict: Verdict, **measured: Any) -> None:
    """Record measured values in the verdict, floats rounded (rnd)."""
    verdict.measured.update({k: rnd(v) if isinstance(v, float) else v for k, v in measured.items()})


def interval_of(
    v: Verdict, name: str, ci: stats.Interval, margin: float, side: str
) -> tuple[str, int | None]:
    """Record one effect's interval in the verdict; its outcome and, when INCONCLUSIVE, the
    seeds per arm the observed spread would need."""
    outcome = stats.outcome(ci, margin, side)
    need = stats.seeds_needed(ci, margin, side) if outcome == "INCONCLUSIVE" else None
    v.intervals[name] = {
        "effect": rnd(ci.effect),
        "lo": rnd(ci.lo),
        "hi": rnd(ci.hi),
        "n": list(ci.n),
        "method": ci.method,
        "scale": ci.scale,
        "margin": margin,
        "side": side,
        "outcome": outcome,
        **({"seeds_needed": need} if outcome == "INCONCLUSIVE" else {}),
    }
    return outcome, need


def decide_all(v: Verdict, parts: dict[str, tuple[stats.Interval, float, str]]) -> Verdict:
    """Decide a claim made of one or more effects (``parts``: name -> (interval, margin,
    side)): PASS when every interval lies on its claim's side, FAIL when any lies on the other
    side, else INCONCLUSIVE, naming the effects the seeds cannot settle."""
    outcomes = {name: interval_of(v, name, *part) for name, part in parts.items()}
    found = {o for o, _ in outcomes.values()}
    v.status = "FAIL" if "FAIL" in found else "INCONCLUSIVE" if "INCONCLUSIVE" in found else "PASS"
    if v.status == "INCONCLUSIVE":
        open_ = [
            f"{name} (" + (f"~{need} seeds per arm would settle it" if need else "on the margin")
            + ")"
            for name, (o, need) in outcomes.items()
            if o == "INCONCLUSIVE"
        ]  # fmt: skip
        said = f"the 95% interval straddles the margin for {', '.join(open_)}"
        v.note = "; ".join(x for x in (v.note, said) if x)
    return v


def decide_interval(
    v: Verdict, name: str, ci: stats.Interval, margin: float, side: str, **measured: Any
) -> Verdict:
    """Decide a claim of one effect on its interval (see decide_all)."""
    measure(v, **measured)
    v.threshold = v.threshold or f"{name} {SIDE_TEXT[side].format(m=margin)} (95% interval)"
    return decide_all(v, {name: (ci, margin, side)})


def diff(a: dict, b: dict) -> stats.Interval:
    """Welch's interval of mean(best val loss of a) - mean(... of b) over their seeds (a
    diverged seed scores +inf); NO DATA under MIN_SEEDS finished runs in either."""
    return stats.diff_interval(enough_scores(a), enough_scores(b))


Check = Callable[[dict, dict, Verdict], Verdict]
