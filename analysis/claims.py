"""A researcher's own claims about their sweep, declared as the findings declare theirs
(analysis/findings/declare.py) and decided by the same judge (analysis/findings/judge.py):
``python scripts/compare.py SWEEP --claims claims.yaml`` or ``--claim LINE``; and the
comparisons ``--baseline KEY=VALUE`` asks for, each a claim of its own.

A claim file::

    claims:
      - id: hc_beats_plain
        statement: hyper-connections end below the plain residual sum
        arms: [model.connection=hc, model.connection=residual]   # or {key: value} mappings
        measure: best_val_loss  # any per-run measure (analysis/findings/measures.py)
        estimand: auto          # auto: paired by seed where the arms share an init, else diff
        side: below             # below | above | within
        margin: 0.0
        seeds: auto             # per arm on the fresh seeds; auto: sized from the pilot
        lr: stable_best         # each arm at its stable best lr | fixed | curve

The one-line form: ``[ID:] [MEASURE:] ARM - ARM < MARGIN`` (``>`` for above, ``~`` for within
±MARGIN; ``/`` instead of ``-`` compares a ratio); an ARM is ``key=value[,key=value]``, and a
measure ``trained``, ``not_trained`` or ``diverged`` compares the two arms' rates of that outcome
by Fisher's exact test. Keys are read as the report names them: ``connection`` or
``model.connection``, ``n_embd`` or ``model.n_embd``, ``lr`` or ``optim.lr``, ``param``.

``estimand: auto`` pairs by seed when both arms ran the same seeds with the same parameter count
(equal shapes: a seed draws the same initial weights, and every arm at a seed draws the same
batches), else compares them unpaired (Welch); a claim is declared (and frozen) with the
estimand it resolved to on the pilot.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from analysis.findings.declare import EVENTS, Claim, Finding, Part
from analysis.findings.judge import judge_finding
from analysis.findings.measures import MEASURES
from analysis.findings.measures import table as run_table
from analysis.runs import CANONICAL
from runs.errors import ConfigError

AUTO = "auto"
MEASURE_NAMES = {*MEASURES, *EVENTS}
SEEDS_DEFAULT = 5  # per arm, when a claim names none and no pilot sizes it
SIDES = {"<": "below", ">": "above", "~": "within"}
LINE = re.compile(
    r"^\s*(?:(?P<id>[\w.-]+)\s*:\s*)?(?:(?P<measure>[\w/]+)\s*:\s*)?"
    r"(?P<a>[^<>~]+?)\s+(?P<op>[-/])\s+(?P<b>[^<>~]+?)\s*(?P<side>[<>~])\s*(?P<margin>[-+.\deE]+)\s*$"
)
# report param -> the config key (and override) a user may write instead
FULL_KEYS = {short: keys[0] for short, keys in CANONICAL.items()}
OVERRIDE_OF = {"model": "model", "placement": "placement", "norm": "norm", "param": "param",
               "n_layer": "model.n_layer", "n_embd": "model.n_embd", "lr": "optim.lr",
               "warmup_steps": "optim.warmup_steps"}  # fmt: skip


# --- reading a declaration -----------------------------------------------------------------------
def arm_of(text: Any) -> dict[str, Any]:
    """``model.connection=hc,model.streams=4`` (or a mapping) as {key: value}, values typed."""
    if isinstance(text, dict):
        return dict(text)
    arm = {}
    for item in str(text).split(","):
        key, eq, value = item.strip().partition("=")
        if not eq or not key:
            raise ConfigError(f"arm '{text}': write it as key=value[,key=value]")
        arm[key.strip()] = yaml.safe_load(value.strip())
    return arm


def parse_line(text: str, index: int = 1) -> dict[str, Any]:
    """One claim from its one-line form (see the module docstring), as a claim file's entry."""
    found = LINE.match(text)
    if found and found["id"] and not found["measure"] and found["id"] in MEASURE_NAMES:
        found = LINE.match(f"claim{index}: {text.strip()}")  # the one prefix is the measure
    if not found:
        raise ConfigError(
            f"claim '{text}': write it as '[id:] [measure:] key=value - key=value < margin' "
            "(> above, ~ within; / for a ratio)"
        )
    measure = found["measure"] or "best_val_loss"
    entry: dict[str, Any] = {"id": found["id"] or f"claim{index}", "measure": measure,
                             "arms": [found["a"], found["b"]], "side": SIDES[found["side"]],
                             "margin": float(found["margin"])}  # fmt: skip
    if measure in EVENTS:
        entry.update(estimand="rate2", event=measure, measure="best_val_loss", lr="curve")
    elif found["op"] == "/":
        entry["estimand"] = "ratio2"
    return entry


def read_entries(path: Path | None = None, lines: list[str] = ()) -> list[dict[str, Any]]:
    """The claim entries of a claim file and of one-line claims, in that order."""
    entries: list[dict[str, Any]] = []
    if path is not None:
        try:
            node = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as err:
            raise ConfigError(f"cannot read the claims in {path} ({err}); fix the file") from None
        items = node.get("claims") if isinstance(node, dict) else None
        if not isinstance(items, list):
            raise ConfigError(f"{path}: no 'claims:' list; see analysis/claims.py for the form")
        entries += [i if isinstance(i, dict) else parse_line(str(i), n) for n, i in
                    enumerate(items, 1)]  # fmt: skip
    entries += [parse_line(line, len(entries) + i) for i, line in enumerate(lines, 1)]
    ids = [str(e.get("id")) for e in entries]
    if len(set(ids)) < len(ids):
        raise ConfigError(f"two claims share an id ({', '.join(ids)}); give each its own")
    return entries


def report_key(key: str, rows: list[dict]) -> str:
    """A key as the report's rows name it: a canonical config key by its short name, a short
    name by the one row key that ends in it."""
    for short, full in FULL_KEYS.items():
        if key in (full, short) or key == OVERRIDE_OF[short]:
            return short
    keys = {k for r in rows for k in r["arm"]}
    if key in keys:
        return key
    ends = sorted(k for k in keys if k.rsplit(".", 1)[-1] == key)
    return ends[0] if len(ends) == 1 else key


def varied(rows: list[dict]) -> dict[str, set]:
    """The row keys whose values differ across the sweep (lr included), with their values."""
    values: dict[str, set] = {}
    for r in rows:
        for k, v in r["arm"].items():
            values.setdefault(k, set()).add(repr(v))
    return {k: v for k, v in values.items() if len(v) > 1}


def shares_init(a: list[dict], b: list[dict]) -> bool:
    """Both arms ran the same seeds (>= 2) with the same parameter count."""
    seeds = {r["seed"] for r in a} & {r["seed"] for r in b}
    params = {r["values"].get("params") for r in [*a, *b]}
    return len(seeds) >= 2 and len(params) == 1 and None not in params


def declare(entry: dict[str, Any], rows: list[dict], seeds: int | None = None) -> Claim:
    """A claim file's entry as a Claim over these rows: keys as the report names them, an
    ``auto`` estimand resolved (``shares_init``), ``seeds`` (or the entry's) per arm."""
    from analysis.findings.select import matching

    known = varied(rows)
    arms = []
    for text in entry.get("arms") or []:
        arm = {report_key(k, rows): v for k, v in arm_of(text).items()}
        still = [k for k in arm if k not in known]
        if still:
            raise ConfigError(
                f"claim {entry.get('id')}: this sweep does not vary {', '.join(still)}; its "
                f"runs differ in: {', '.join(sorted(known)) or 'nothing'}"
            )
        arms.append(arm)
    if len(arms) != 2:
        raise ConfigError(f"claim {entry.get('id')}: name two arms (arms: [A, B])")
    estimand = entry.get("estimand", AUTO)
    if estimand == AUTO:
        found = [matching(rows, arm) for arm in arms]
        estimand = "paired" if shares_init(*found) else "diff"
    n = seeds or entry.get("seeds")
    try:
        part = Part(estimand, tuple(arms), float(entry.get("margin", 0.0)),
                    str(entry.get("side", "below")), str(entry.get("measure", "best_val_loss")),
                    event=str(entry.get("event", "not_trained")))  # fmt: skip
        return Claim(str(entry.get("id")), str(entry.get("statement") or entry.get("id")),
                     str(entry.get("source", "user")), (part,),
                     int(n) if n not in (None, AUTO) else SEEDS_DEFAULT,
                     lr=str(entry.get("lr", "stable_best")))  # fmt: skip
    except (ValueError, TypeError, KeyError) as err:
        raise ConfigError(f"claim {entry.get('id')}: {err}") from None


# --- deciding ------------------------------------------------------------------------------------
BASE_MEASURES = ("best_val_loss", "params")  # what the lr rule and the pairing read


def measures_of(entries: list[dict]) -> set[str]:
    """The per-run measures claim entries read (a rate reads the runs' outcomes)."""
    return {str(e.get("measure", "best_val_loss")) for e in entries}


def user_table(report: dict, measures: Iterable[str] = (), decide: Iterable = ()) -> dict:
    """The per-run table claims are decided on (the findings' measures.table), read once: the
    measures named, the lr rule's loss and the parameter count."""
    return run_table(report, {*measures, *BASE_MEASURES}, {}, list(decide))


def decide(claims: list[Claim], table: dict, frozen: Any = None) -> list[dict[str, Any]]:
    """Each claim's verdict by the findings' judge, Holm within the set."""
    return judge_finding(Finding("user", "a user's claims", tuple(claims)), table, frozen)


def sized(claim: Claim, table: dict, tests: int = 1) -> Claim:
    """The claim with its seeds per arm sized on the pilot ``table`` to pass as one of
    ``tests`` claims under Holm (analysis/power.py)."""
    from analysis.power import claim_seeds

    return replace(claim, seeds=claim_seeds(claim, table, tests)[0])


# --- comparisons against a baseline ------------------------------------------------------------
def baseline_claims(
    rows: list[dict], baseline: str, margin: float = 0.0, measure: str = "best_val_loss"
) -> tuple[list[Claim], list[Claim]]:
    """``--baseline KEY=VALUE[,...]``: each variant (the swept keys but lr) against the
    baseline at its other keys' values, as claims: the difference of ``measure`` at each one's
    stable best lr within ±``margin`` (paired by seed where the arms share an init), and the
    rate of runs that did not train over every swept lr (Fisher's exact test). Two sets, each
    its own Holm family."""
    known = varied(rows)
    base = {report_key(k, rows): v for k, v in arm_of(baseline).items()}
    if missing := [k for k in base if k not in known]:
        raise ConfigError(
            f"--baseline {baseline}: this sweep does not vary {', '.join(missing)}; its runs "
            f"differ in: {', '.join(sorted(known)) or 'nothing'}"
        )
    keys = sorted(k for k in known if k != "lr")
    groups = sorted({tuple(r["arm"].get(k) for k in keys) for r in rows}, key=repr)
    arms = [dict(zip(keys, values, strict=True)) for values in groups]
    bases = [a for a in arms if all(a.get(k) == v for k, v in base.items())]
    losses, rates = [], []
    for arm in arms:
        if arm in bases:
            continue
        # the baseline run at this variant's other settings: the one agreeing on the most keys
        # (a key the baseline's choice implies, model.streams beside model.connection, differs)
        agree = {i: sum(b[k] == arm[k] for k in keys) for i, b in enumerate(bases)}
        best = [i for i, n in agree.items() if n == max(agree.values(), default=-1)]
        if len(best) != 1:
            continue
        other = bases[best[0]]
        name = " ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in arm.items() if other[k] != v)
        loss = {"id": name, "arms": [arm, other], "margin": margin, "side": "within",
                "measure": measure, "statement": f"{name} against the baseline"}  # fmt: skip
        losses.append(declare(loss, rows))
        rate = {**loss, "estimand": "rate2", "event": "not_trained", "side": "above",
                "lr": "curve"}  # fmt: skip
        rates.append(declare(rate, rows))
    if not losses:
        raise ConfigError(f"--baseline {baseline}: no variant of this sweep to compare with it")
    return losses, rates


WORDS = {"PASS": "within ±{m:g}", "INCONCLUSIVE": "unresolved", "NO DATA": "no data",
         "NOT TESTABLE": "not testable"}  # fmt: skip


def decision(verdict: dict, margin: float) -> str:
    """A comparison's Holm-adjusted verdict in words: lower, higher, within ±margin, or
    unresolved."""
    status = verdict["holm_status"]
    if status == "FAIL":
        (effect,) = verdict["effects"].values()
        return "lower" if effect["effect"] < 0 else "higher"
    return WORDS.get(status, status.lower()).format(m=margin)


def rate_text(arm: dict[str, Any]) -> str:
    """``trained 3/3 [0.29, 1.00]``: an arm's trained runs with their exact interval."""
    from analysis.stats import rate_interval

    n = arm.get("runs", 0)
    if not n:
        return "no runs"
    k = arm.get("trained", 0)
    lo, hi = rate_interval(k, n)
    return f"trained {k}/{n} [{lo:.2f}, {hi:.2f}]"


def comparison_cells(
    losses: list[dict], rates: list[dict], claims: list[Claim], margin: float
) -> tuple[list[str], list[list[str]]]:
    """The comparisons' table: each variant against the baseline, the difference at each one's
    stable best lr with its 95% interval, Holm's decision over the pairs shown, the seeds per
    arm a decision at ``margin`` needs (80% power), and the not-trained rates over every lr."""
    from analysis.power import part_seeds
    from analysis.stats import rate_interval

    head = ["variant", "vs", "at lr", "difference [95%]", "n", "decision (Holm)",
            "seeds for 80% power", "did not train, every lr (Fisher, Holm)"]  # fmt: skip
    table = []
    for loss, rate, claim in zip(losses, rates, claims, strict=True):
        names = list(loss["arms"])
        lrs = " / ".join(f"{a['lr']:g}" if "lr" in a else "–" for a in loss["arms"].values())
        cells = [names[0], names[-1], lrs]
        if loss["effects"]:
            ((what, e),) = loss["effects"].items()
            paired = "paired" if claim.parts[0].estimand == "paired" else "Welch"
            cells += [f"{e['effect']:+.4f} [{e['lo']:+.4f}, {e['hi']:+.4f}] ({paired})",
                      "/".join(map(str, e["n"])), decision(loss, margin)]  # fmt: skip
            n, _ = part_seeds(claim.parts[0], e)
            cells.append(str(n) if n is not None else "> 1000")
        else:
            cells += ["–", "–", f"no data ({loss['note']})", "–"]
        if rate["effects"]:
            ((_, r),) = rate["effects"].items()
            shown = []
            for k, n in zip(r["k"], r["n"], strict=True):
                lo, hi = rate_interval(k, n)
                shown.append(f"{k}/{n} [{lo:.2f}, {hi:.2f}]")
            word = {"PASS": "more often", "FAIL": "less often"}.get(
                rate["holm_status"], "no difference shown"
            )
            cells.append(f"{' vs '.join(shown)}: {word}")
        else:
            cells.append("–")
        table.append(cells)
    return head, table


def claim_cells(verdicts: list[dict]) -> tuple[list[str], list[list[str]]]:
    """A user's claims as the findings' verdict table shows them."""
    from analysis.findings.verdict_text import arms, effects

    head = ["claim", "rule", "effects [95% interval]", "arms", "verdict", "Holm", "mode"]
    rows = []
    for v in verdicts:
        shown = effects(v["effects"]) + (f"; {v['note']}" if v["note"] else "")
        rows.append([v["id"], v["rule"], shown, arms(v["arms"]), v["status"], v["holm_status"],
                     v["mode"]])  # fmt: skip
    return head, rows
