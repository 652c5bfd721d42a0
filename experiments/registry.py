"""The reproduce command's two modes on the declared registry rather than on a sweep:
``--freeze`` (frozen.json: every claim's hash and its fresh seeds) and ``--recompute`` (each
published verdict decided again from its own table)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from analysis.findings import ALIASES, FINDINGS, FROZEN, frozen, hash_now, recompute
from analysis.findings.declare import Frozen, claim_hash
from experiments.sweep import ROOT, compose, console, split_overrides
from experiments.verdicts import read_verdict, write_record


def freeze(only: list[str] | None = None) -> int:
    """Write frozen.json: the registry's hash, each claim's hash and first fresh seed, the date
    and the commit. A second freeze keeps the entries of every finding none of whose claims
    changed; a finding with a new or changed claim runs again, so all its claims get seeds past
    every seed handed out before (a confirmatory run is never repeated on seeds it has seen).
    ``only`` (finding names): freeze those; every other finding keeps its entries, or stays
    unfrozen (its pilots still to run)."""
    import datetime
    import subprocess

    names = [ALIASES.get(n, n) for n in only or []]
    if unknown := [n for n in names if n not in FINDINGS]:
        raise SystemExit(
            f"error: --freeze {' '.join(unknown)}: no such finding; choose from "
            f"{', '.join(FINDINGS)}"
        )
    before = frozen() or Frozen("")
    # past every seed a freeze handed out and every seed a published verdict was decided on
    # (a lost or cut frozen.json never hands those out again)
    first, claims, changed = max(before.next_seed, past_published_seeds()), {}, []
    for name, finding in FINDINGS.items():
        if names and name not in names:
            claims |= {c.id: before.claims[c.id] for c in finding.claims if c.id in before.claims}
            continue
        moved = [c.id for c in finding.claims
                 if (before.claims.get(c.id) or {}).get("hash") != claim_hash(c)]  # fmt: skip
        for claim in finding.claims:
            if moved:  # the finding runs again: every claim of it on the new seeds
                claims[claim.id] = {"hash": claim_hash(claim), "first_seed": first}
            else:  # unchanged: its seeds and any verdict on them stand
                claims[claim.id] = before.claims[claim.id]
        changed += moved
    if before.claims:
        console.print(
            f"refreezing: new or changed since the last freeze: {', '.join(changed) or 'none'}"
        )
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=ROOT, check=False)  # fmt: skip
    step = 1000 if changed else 0  # the next freeze's seeds lie past every one handed out
    configs = {e: h for e, h in before.configs.items()}
    for finding in FINDINGS.values():  # the frozen findings' experiments, as they are now
        if any(c.id in claims for c in finding.claims) and (
            finding.experiment not in configs or any(c.id in changed for c in finding.claims)
        ):
            configs[finding.experiment] = config_hash(finding.experiment)
    # the date and commit are the claims' freeze: kept when no claim moved (a refreeze that
    # only records the experiments' configs does not re-date the claims)
    when = (before.date, before.commit) if before.claims and not changed else (
        datetime.date.today().isoformat(), git.stdout.strip())  # fmt: skip
    record = Frozen(frozen_registry(claims), claims, first + step, *when, configs)
    FROZEN.write_text(json.dumps(dataclasses.asdict(record), indent=1) + "\n")
    seeds = f"{first}..{first + max(f.seeds for f in FINDINGS.values()) - 1}" if changed else "none"
    console.print(f"frozen: registry {record.registry}, {len(claims)} claims; fresh seeds of the "
                  f"new or changed ones: {seeds} -> {FROZEN}")  # fmt: skip
    return 0


PUBLISHED = ROOT / "docs" / "findings"


def deciding_config(experiment: str, overrides: list[str] | tuple = ()) -> dict[str, Any]:
    """What an experiment's runs are, flat: its resolved config (steps, sizes, data, the
    reproduce node) without the operational keys and without the settings left null, and its
    grid (the sweeper's params, with the command line's sweep overrides). A null setting is off
    or its default: a feature added later with a null default leaves every frozen hash as it
    was, while any value an experiment sets is in it."""
    from omegaconf import OmegaConf

    from runs.runfiles import flatten
    from runs.settings import is_operational

    node = OmegaConf.to_container(compose(experiment, list(overrides)), resolve=False)
    grid = dict((node.pop("hydra", {}).get("sweeper") or {}).get("params") or {})
    grid |= dict(o.split("=", 1) for o in split_overrides(list(overrides))[1])
    flat = {
        k: v
        for k, v in flatten(node).items()
        if k != "run_dir" and not is_operational(k) and v is not None
    }
    return flat | {f"grid.{k}": str(v) for k, v in grid.items()}


def config_hash(experiment: str, overrides: list[str] | tuple = ()) -> str:
    import hashlib

    text = json.dumps(deciding_config(experiment, overrides), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def unfrozen_runs(finding_name: str, experiment: str, overrides: list[str]) -> str | None:
    """Why a reproduce's runs are not those its freeze covers (its verdicts exploratory), or
    None: a claim is declared anew since its freeze (its runs are a pilot until it is frozen
    again), the overrides change the experiment's resolved config, or its yaml changed since
    the freeze, or it is another size than the frozen one."""
    record = frozen()
    finding = FINDINGS[ALIASES.get(finding_name, finding_name)]
    if record is None or not any(c.id in record.claims for c in finding.claims):
        return None
    anew = [c.id for c in finding.claims if record.anew(c)]
    if anew:
        return (f"{', '.join(anew)} declared anew since the freeze: a pilot, on the seeds the "
                f"command gives; freeze {finding_name} again to decide it")  # fmt: skip
    now = config_hash(experiment, overrides)
    if now != config_hash(experiment):
        shown = " ".join(o for o in overrides if "=" in o)
        return f"the command's overrides ({shown}) change what the frozen experiment runs"
    frozen_hash = record.configs.get(finding.experiment)
    if experiment != finding.experiment:
        return f"experiment={experiment} is not the frozen size ({finding.experiment})"
    if frozen_hash is not None and frozen_hash != now:
        return f"conf/experiment/{experiment}.yaml changed since the freeze (freeze it again)"
    return None


def past_published_seeds(folder: Path | None = None) -> int:
    """The first multiple of 1000 past every seed a published verdict's table holds."""
    folder, seeds = folder or PUBLISHED, [0]
    for path in folder.glob("*/verdict.json"):
        record = read_verdict(path) or {}
        rows = (record.get("table") or {}).get("rows") or []
        seeds += [r["seed"] for r in rows if isinstance(r, dict) and isinstance(r.get("seed"), int)]
    return (max(seeds) // 1000 + 1) * 1000


def frozen_registry(claims: dict[str, dict]) -> str:
    """frozen.json's ``registry``: one hash of the claim hashes it records (registry_hash's
    rule), so the file can be checked against itself."""
    import hashlib

    hashes = "".join(sorted(str(c["hash"]) for c in claims.values()))
    return hashlib.sha256(hashes.encode()).hexdigest()[:16]


def freeze_problems() -> list[str]:
    """What does not hold in frozen.json: its registry hash against its own claims, and each
    frozen claim's hash against the claim as declared now."""
    record = frozen()
    if record is None:
        return []
    out = []
    if record.registry != frozen_registry(record.claims):
        out.append(f"frozen.json's registry {record.registry} is not the hash of its claims "
                   f"({frozen_registry(record.claims)}): the file was edited by hand")  # fmt: skip
    for finding in FINDINGS.values():
        for claim in finding.claims:
            if record.anew(claim):
                out.append(f"{claim.id} is declared anew since its freeze (frozen "
                           f"{record.claims[claim.id].get('hash')}, now {claim_hash(claim)}): "
                           "freeze it again with its ledger entry")  # fmt: skip
    return out


def text(verdict: dict) -> str:
    """A verdict as JSON text: what verdict.json holds, compared byte for byte (NaN included)."""
    return json.dumps(verdict, sort_keys=True)


def recompute_all(paths: list[Path], write: bool = False) -> int:
    """Each verdict.json's claims decided again from its own table; 1 when one differs. A dir
    without one (a finding not yet run) is named and passed over, as are files that are no
    verdict (docs/findings/*'s README.md and ledger.json). ``write`` (--rejudge): a file that
    differs gets the verdicts decided again (and its verdict.md), each verdict word that moved
    printed for the ledger."""
    code = 0
    for problem in freeze_problems():
        console.print(f"error: {problem}", markup=False)
        code = 1
    for path in paths:
        if path.is_dir() and not (path / "verdict.json").exists():
            console.print(f"{path}: no verdict yet", markup=False)  # declared, not yet run
            continue
        if path.is_file() and not path.name.startswith("verdict"):
            continue  # docs/findings/*'s README.md and ledger.json
        path = path / "verdict.json" if path.is_dir() else path
        record = read_verdict(path)
        if record is None or "table" not in record:
            console.print(f"error: {path} holds no verdict table to recompute", markup=False)
            code = 1
            continue
        if record.get("finding") not in FINDINGS:
            console.print(f"error: {path}: finding {record.get('finding')!r} is not in the "
                          f"registry; choose from {', '.join(FINDINGS)}", markup=False)  # fmt: skip
            code = 1
            continue
        try:
            again = recompute(record)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            console.print(f"error: {path}: its table cannot be read ({type(err).__name__}: "
                          f"{err}); restore verdict.json from its published copy",
                          markup=False)  # fmt: skip
            code = 1
            continue
        pairs = list(zip(again, record["claims"], strict=False))
        # a claim declared anew since (its hash moved) is decided by other rules now, so its
        # file cannot be checked against them
        # a claim whose declaration moved since (a ledger entry, or a hand-edited file) is
        # decided by other rules now: never "identical"
        anew = [a["id"] for a, b in pairs if a["hash"] != b.get("hash")]
        differs = [a["id"] for a, b in pairs if text(a) != text(b)]
        if len(again) != len(record["claims"]):
            differs.append("the number of claims")
        same = "identical" if not differs else f"DIFFERENT ({', '.join(differs)})"
        if anew:
            same += (f"; {', '.join(anew)}: the declaration's hash differs from the file's "
                     "(declared anew since, or the file was edited): decide it again")  # fmt: skip
        registry = "" if record.get("registry") == hash_now() else " (registry changed since)"
        console.print(f"{path}: {len(again)} verdicts recomputed, {same}{registry}", markup=False)
        if write and differs and not anew:
            rewrite(path, record, again)
            continue
        code = max(code, int(bool(differs)))
    return code


def rewrite(path: Path, record: dict, again: list[dict]) -> None:
    """The file's verdicts replaced by those decided again; each moved verdict word printed."""
    for new, old in zip(again, record["claims"], strict=True):
        for key in ("status", "holm_status"):
            if new.get(key) != old.get(key):
                console.print(f"  {new['id']} {key}: {old.get(key)} -> {new.get(key)} (same "
                              "data): its ledger entry goes in docs/findings/ledger.json",
                              markup=False)  # fmt: skip
    write_record(path, {**record, "claims": again})
    console.print(f"  {path} and {path.with_suffix('.md').name} written", markup=False)
