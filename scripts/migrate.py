"""Bring run dirs written by older normlab code to the current layout: once, in place.

    python -m scripts.migrate outputs/ multirun/     # every run dir below these
    python -m scripts.migrate outputs/ --dry-run     # only say what would change

The readers accept the current layout only; this is where every older one is converted:

- the config records (.hydra/config.yaml, summary.json's run_config): the model keys that
  placement and norm options were before they had groups (model.deepnorm_alpha is
  placement.alpha, model.norm_eps is norm.eps, ..., model.placement is placement.name), and a
  ReZero record's ``placement.gates`` where it lacks one: "sublayer", the one gate per sub-layer
  ReZero ran with before the key existed (the key's default is now "layer");
- checkpoints (*.ckpt): the same keys in the model config they carry, DyT's scalar alpha saved as
  a 0-dim tensor (now shape (1,)), and a digest file (``<ckpt>.sha256``) for a checkpoint
  written before digests were recorded (one whose digest file disagrees is damage: left alone);
- probe.json: a bare list of records, records under another key, or a single record, as
  ``{"runs": [...], <shared fields>}``.

A file already in the current layout is left untouched. Run it while no run is writing to the
dirs (each rewrite is atomic; a run dir whose lock is held is skipped).
"""

from __future__ import annotations

import argparse
import json
import sys  # noqa: I001
from collections.abc import Callable
from pathlib import Path
from typing import Any

# This checkout's packages, never an installed copy of another.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

from runs import runfiles
from runs.dirlock import RunDirLock
from runs.errors import Refused
from runs.runfiles import write_atomic
from runs.settings import FLAT_FIELDS

# A key added with a default other than what the runs before it ran: (placement, key, value).
RAN_BEFORE_KEY = ("rezero", "gates", "sublayer")


def nested(model: dict, groups: dict[str, dict] | None = None) -> tuple[dict, dict[str, dict]]:
    """``model`` without its flat keys, and the placement / norm groups holding them (into
    ``groups``: a config's own group nodes; None: the model config's sub-configs)."""
    model = dict(model)
    inside = groups is None
    if inside:  # a sub-config saved as its name alone, or as its fields
        groups = {g: as_group(model.get(g)) for g in ("placement", "norm")}
    for key, (group, name) in FLAT_FIELDS.items():
        if key in model and not (inside and key == group):
            groups.setdefault(group, {})[name] = model.pop(key)
    placement, key, value = RAN_BEFORE_KEY
    if groups.get("placement", {}).get("name") == placement:
        groups["placement"].setdefault(key, value)
    if inside:
        model.update(groups)
    return model, groups


def as_group(value: Any) -> dict:
    return {"name": value} if isinstance(value, str) else dict(value or {})


def config_record(cfg: dict) -> dict:
    """A composed config (.hydra/config.yaml) in the current layout."""
    if not isinstance(cfg.get("model"), dict):
        return cfg
    groups = {g: dict(cfg.get(g) or {}) for g in ("placement", "norm")}
    model, groups = nested(cfg["model"], groups)
    return {**cfg, "model": model, **groups}


def migrated_run_config(flat: dict) -> dict:
    """summary.json's run_config (dotted keys) in the current layout."""
    out = {}
    for key, value in flat.items():
        group, _, name = key.partition(".")
        if group == "model" and name in FLAT_FIELDS:
            key = ".".join(FLAT_FIELDS[name])
        out[key] = value
    placement, key, value = RAN_BEFORE_KEY
    if out.get("placement.name") == placement:
        out.setdefault(f"placement.{key}", value)
    return out


def summary_record(summary: dict) -> dict:
    rc = summary.get("run_config")
    return {**summary, "run_config": migrated_run_config(rc)} if isinstance(rc, dict) else summary


def probe_record(data: Any) -> Any:
    """probe.json as {"runs": [...], ...}: a bare list wrapped, the list of records under
    another key (``records``) renamed, a single record wrapped."""
    if isinstance(data, list):
        return {"runs": data}
    if not isinstance(data, dict) or isinstance(data.get("runs"), list):
        return data
    for key, value in data.items():
        if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
            return {("runs" if k == key else k): v for k, v in data.items()}
    return {"runs": [data]}


def rewrite(path: Path, change: Callable[[Any], Any], fmt: str, dry: bool) -> bool:
    """Apply ``change`` to the file's content; write it back when it changed."""
    load, dump = {
        "json": (json.loads, lambda d: json.dumps(d, indent=2) + "\n"),
        "yaml": (yaml.safe_load, lambda d: yaml.safe_dump(d, sort_keys=False)),
    }[fmt]
    old = load(path.read_text())
    new = change(old)
    if new == old:
        return False
    if not dry:
        write_atomic(path, dump(new))
    return True


def checkpoint(path: Path, dry: bool) -> list[str]:
    """What the checkpoint at ``path`` needed: its model config, DyT's alpha, its digest."""
    import torch

    from training.reliability.checkpoint_io import AtomicCheckpointIO
    from training.reliability.checkpoints import (
        digest_path,
        file_digest,
        recorded_digests,
    )

    if digest_path(path).exists() and file_digest(path) not in recorded_digests(path):
        return ["damaged or unreadable digest: left alone"]
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # torch raises many types for cut or foreign files
        return ["unreadable: left alone"]
    done = []
    hp = ckpt.get("hyper_parameters") or {}
    if isinstance(hp.get("model_config"), dict):
        model, _ = nested(hp["model_config"])
        if model != hp["model_config"]:
            hp["model_config"] = model
            done.append("model config")
    state = ckpt.get("state_dict") or {}
    scalars = [k for k, v in state.items() if k.endswith(".alpha") and v.dim() == 0]
    for key in scalars:
        state[key] = state[key].reshape(1)
    done += ["DyT alpha"] if scalars else []
    if done and not dry:
        AtomicCheckpointIO().save_checkpoint(ckpt, path)  # writes the digest with it
    elif not digest_path(path).exists():
        done.append("digest")
        if not dry:
            from training.reliability.checkpoints import write_digests

            write_digests(path, [file_digest(path)])
    return done


def migrate_dir(run_dir: Path, dry: bool) -> list[str]:
    """Every file of one run dir in the current layout; what changed, one entry a file."""
    changed = []
    for name, change, fmt in (
        (runfiles.CONFIG, config_record, "yaml"),
        (runfiles.SUMMARY, summary_record, "json"),
        (runfiles.PROBE, probe_record, "json"),
    ):
        if (run_dir / name).is_file() and rewrite(run_dir / name, change, fmt, dry):
            changed.append(name)
    for ckpt in sorted(run_dir.glob("*.ckpt")):
        changed += [f"{ckpt.name}: {what}" for what in checkpoint(ckpt, dry)]
    return changed


def recognised(run_dir: Path) -> bool:
    """Whether ``run_dir`` is a normlab run dir: a summary.json with a run's status and what it
    trained, a config record with a model and a placement, or an init probe's probe.json.
    Anything else (another tool's files) is never touched."""

    def read(name: str, load: Callable[[str], Any]) -> Any:
        try:
            return load((run_dir / name).read_text())
        except (OSError, ValueError, yaml.YAMLError):
            return None

    summary = read(runfiles.SUMMARY, json.loads)
    if (
        isinstance(summary, dict)
        and "status" in summary
        and ({"model", "placement", "run_config"} & set(summary))
    ):
        return True
    config = read(runfiles.CONFIG, yaml.safe_load)
    if isinstance(config, dict) and {"model", "placement"} <= set(config):
        return True
    probe = read(runfiles.PROBE, json.loads)
    records = probe.get("runs") if isinstance(probe, dict) else probe
    if isinstance(probe, dict) and not isinstance(records, list):
        records = [probe]
    if isinstance(records, list) and any(isinstance(r, dict) and "placement" in r for r in records):
        return True
    return any(normlab_checkpoint(path) for path in run_dir.glob("*.ckpt"))


def normlab_checkpoint(path: Path) -> bool:
    """A Lightning checkpoint normlab's task wrote: its task state, or a model config."""
    import torch

    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - torch raises many types for cut or foreign files
        return False
    hp = ckpt.get("hyper_parameters") if isinstance(ckpt, dict) else None
    return isinstance(ckpt, dict) and (
        "normlab_task" in ckpt or (isinstance(hp, dict) and "model_config" in hp)
    )


def run_dirs(root: Path) -> list[Path]:
    """Every dir below ``root`` (itself included) that holds a run's files."""
    marks = (runfiles.SUMMARY, runfiles.CONFIG, runfiles.PROBE, "*.ckpt")
    found = {p.parent for mark in marks for p in root.rglob(mark)}
    found = {d.parent if d.name == runfiles.HYDRA_DIR else d for d in found}
    return sorted(d for d in found if not set(d.parts) & runfiles.NOT_RUNS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.migrate", description=__doc__)
    parser.add_argument("dirs", nargs="+", type=Path, help="sweep or run dirs")
    parser.add_argument("--dry-run", action="store_true", help="say what would change only")
    args = parser.parse_args(argv)
    missing = [str(d) for d in args.dirs if not d.is_dir()]
    if missing:
        parser.error(f"no such directory: {missing[0]}")
    total, code = 0, 0
    for run_dir in (d for root in args.dirs for d in run_dirs(root)):
        if not recognised(run_dir):
            print(f"skip {run_dir}: not a normlab run dir (no run record of normlab's); left alone")
            continue
        try:
            changed = migrate_one(run_dir, args.dry_run)
        except (OSError, ValueError, yaml.YAMLError) as err:
            why = getattr(err, "strerror", None) or str(err).splitlines()[0]
            print(f"error: {run_dir}: {why}; fix or restore the file (or its permissions) and "
                  "run migrate again", file=sys.stderr)  # fmt: skip
            code = 1
            continue
        if changed is None:
            continue
        if changed:
            total += 1
            print(f"{run_dir}: {', '.join(changed)}")
    verb = "would change" if args.dry_run else "changed"
    print(f"{total} run dir{'s' * (total != 1)} {verb}")
    return code


def migrate_one(run_dir: Path, dry: bool) -> list[str] | None:
    """One run dir migrated under its lock (None: another process holds it, skipped)."""
    if dry:
        return migrate_dir(run_dir, dry=True)
    lock = RunDirLock(run_dir)
    try:
        lock.acquire()
    except Refused as err:
        print(f"skip {run_dir}: {err}")
        return None
    try:
        return migrate_dir(run_dir, dry=False)
    finally:
        lock.release()


if __name__ == "__main__":
    sys.exit(main())
