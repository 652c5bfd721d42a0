"""A researcher's claims through the findings' protocol, on their own sweep
(``python scripts/compare.py SWEEP --claims claims.yaml [--freeze | --confirm]``):

    decide    each claim on the sweep's runs by the findings' judge: exploratory (a pilot)
    --freeze  each claim's declaration and hash in SWEEP/claims.frozen.json, with its seeds per
              arm sized on the pilot (analysis/power.py: 80% power, 5 to 10) where the claim
              names none, and fresh seeds no run of the sweep used
    --confirm each arm launched once on the fresh seeds at the lr the claim's rule picks on the
              pilot's seeds (train.py -m into the same sweep dir: a second --confirm finds its
              runs finished and launches nothing), then decided once on the fresh seeds alone:
              confirmatory where the claim still hashes as frozen

A claim changed after its freeze is decided, and said, as exploratory; a freeze is never
redone over a frozen one (its seeds would be chosen after a look).
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from analysis import claims as user
from analysis.findings.declare import Claim, Frozen, claim_hash, declaration
from analysis.findings.select import key_values, label, matching, resolve, stable_best
from runs import runfiles
from runs.errors import ConfigError
from runs.runfiles import write_atomic

FROZEN = "claims.frozen.json"  # in the sweep dir
ROOT = Path(__file__).resolve().parents[1]


def read_frozen(sweep_dir: Path) -> dict[str, Any] | None:
    path = Path(sweep_dir) / FROZEN
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as err:
        raise ConfigError(f"{path} cannot be read ({err}); restore it from a copy") from None


def declared(entries: list[dict], rows: list[dict], frozen: dict | None) -> list[Claim]:
    """The claims of ``entries`` over these rows; a frozen claim whose entry leaves its seeds or
    estimand to the pilot takes the frozen ones (so it hashes as frozen while unchanged)."""
    out = []
    for entry in entries:
        claim = user.declare(entry, rows)
        held = (frozen or {}).get("claims", {}).get(claim.id)
        if held:
            part = held["declaration"]["parts"][0]
            if entry.get("estimand", user.AUTO) == user.AUTO:
                claim = replace(claim, parts=(replace(claim.parts[0], estimand=part["estimand"]),))
            if entry.get("seeds", user.AUTO) == user.AUTO:
                claim = replace(claim, seeds=held["seeds"])
        out.append(claim)
    return out


def fresh(frozen: dict | None) -> list[int]:
    if not frozen:
        return []
    return list(range(frozen["first_seed"], frozen["first_seed"] + frozen["seeds"]))


def judge(report: dict, entries: list[dict], frozen: dict | None) -> tuple[dict, list[dict]]:
    """(table, verdicts): every claim decided on the fresh seeds where they ran (else on every
    seed: exploratory), confirmatory where it hashes as frozen and read those seeds."""
    table = user.user_table(report, user.measures_of(entries))
    found = declared(entries, table["rows"], frozen)
    seen = {r["seed"] for r in table["rows"]}
    table["decide_seeds"] = [s for s in fresh(frozen) if s in seen]
    held = None
    if frozen:
        held = Frozen("user", {c: {"hash": e["hash"], "first_seed": frozen["first_seed"]}
                               for c, e in frozen["claims"].items()})  # fmt: skip
    return table, user.decide(found, table, held)


def freeze(sweep_dir: Path, report: dict, entries: list[dict]) -> dict:
    """Each claim frozen: declaration, hash, seeds per arm (sized on the pilot where the entry
    names none), and one range of fresh seeds after every seed the sweep ran."""
    if read_frozen(sweep_dir):
        raise ConfigError(
            f"{Path(sweep_dir) / FROZEN} exists: these claims were frozen before; confirm them "
            "(--confirm), or declare new ones in a new sweep dir (a freeze after a look would "
            "choose its seeds on the data)"
        )
    table = user.user_table(report, user.measures_of(entries))
    found = declared(entries, table["rows"], None)
    sized = [
        user.sized(c, table, len(found)) if e.get("seeds", user.AUTO) == user.AUTO else c
        for c, e in zip(found, entries, strict=True)
    ]
    seeds = [r["seed"] for r in table["rows"] if isinstance(r["seed"], int)]
    record = {
        "date": datetime.date.today().isoformat(),
        "first_seed": (max(seeds, default=-1) // 100 + 1) * 100,  # past every pilot seed
        "seeds": max(c.seeds for c in sized),
        "claims": {
            c.id: {"hash": claim_hash(c), "seeds": c.seeds, "declaration": declaration(c)}
            for c in sized
        },  # fmt: skip
    }
    write_atomic(Path(sweep_dir) / FROZEN, json.dumps(record, indent=1) + "\n")
    return record


# --- the confirming launches ---------------------------------------------------------------------
def applied(run_dir: Path) -> list[str]:
    """The overrides a run applied: its ``.hydra/overrides.yaml`` less the seed, the lr and the
    keys its job left out (an arm's key of another arm: absent from, or other in, its
    config)."""
    overrides = yaml.safe_load((run_dir / runfiles.OVERRIDES).read_text()) or []
    config = OmegaConf.load(run_dir / runfiles.CONFIG)
    out = []
    for item in map(str, overrides):
        key, _, value = item.lstrip("+~").partition("=")
        if key in ("seed", "optim.lr") or key.startswith("hydra"):
            continue
        if "." in key and OmegaConf.select(config, key, default="<none>") != yaml.safe_load(value):
            continue
        out.append(item)
    return out


def launches(claims: list[Claim], table: dict, report: dict, seeds: list[int]) -> list[list[str]]:
    """One ``train.py -m`` command line per arm and lr: the overrides of one of its pilot runs,
    the lr its claim's rule picks on the pilot's seeds, the fresh seeds."""
    pilot = [r for r in table["rows"] if r["seed"] not in set(seeds)]
    where = {Path(r["run_dir"]).name: r["run_dir"] for v in report["variants"] for r in v["runs"]}
    out: list[list[str]] = []
    for claim in claims:
        for arm in claim.parts[0].arms:
            rows = matching(pilot, resolve(arm, pilot, table["settings"]))
            if not rows:
                raise ConfigError(f"claim {claim.id}: no pilot runs of {arm}")
            others = [k for k in user.varied(rows) if k != "lr"]
            if others:
                raise ConfigError(
                    f"claim {claim.id}: the arm {arm} holds runs that differ in "
                    f"{', '.join(others)}; name them in the arm so it is one variant"
                )
            lrs = key_values(rows, "lr")
            if claim.lr == "curve" or len(lrs) < 2:
                chosen = lrs or [None]
            elif "lr" in arm:
                chosen = [arm["lr"]]
            else:
                chosen = [stable_best(rows, label(arm))[0]]
            for lr in chosen:
                run = next(r for r in rows if lr is None or r["arm"].get("lr") == lr)
                line = applied(Path(where[run["run"]]))
                line += [f"optim.lr={lr!r}"] if lr is not None else []
                line.append("seed=" + ",".join(map(str, seeds)))
                if line not in out:
                    out.append(line)
    return out


def launch(sweep_dir: Path, lines: list[list[str]]) -> int:
    """Each confirming launch into the sweep dir (finished runs are skipped there); the first
    non-zero exit status, or 0."""
    code = 0
    for line in lines:
        command = [sys.executable, str(ROOT / "train.py"), "-m", *line,
                   f"hydra.sweep.dir={Path(sweep_dir).resolve()}"]  # fmt: skip
        print("launching:", " ".join(command[1:]), flush=True)
        code = code or subprocess.run(command, cwd=ROOT).returncode
    return code
