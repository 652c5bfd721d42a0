"""The sweep's report as a wandb run of its own, next to the sweep's runs in their group.

job_type ``report``, name ``report``, its id fixed by the report dir (``report_run_id``), so
that comparing the same sweep again updates that run instead of adding one; one artifact of
type ``report`` holding report.md, report.json and the plots; the plots as images and the
variant table as a wandb Table, so the group's page shows them beside the runs. The run goes
where the sweep's runs went: their project and entity, offline into ``<report dir>/wandb/``
unless they streamed online (or ``WANDB_MODE`` says otherwise). A sweep whose runs did not log
to wandb gets none. Also where the runs logged: their wandb groups (``wandb_groups``) and one
shell glob that uploads their offline runs (``wandb_sync_pattern``).
"""

from __future__ import annotations

import glob as globlib
import hashlib
import os
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from analysis.runs import Run, Warnings, first_present, read_yaml_flat
from runs import runfiles

REPORT_FILES = ("report.md", "report.json", "report.html")
WHERE = ("project", "entity", "mode")  # logger.wandb.<key> in the runs' configs


def wandb_target(runs: list[Run]) -> dict[str, Any] | None:
    """project, entity and mode the sweep's runs logged with (the most common), or None when no
    run logged to wandb (no ``wandb/`` in its dir: logger=csv, wandb disabled, or no training)."""
    found: Counter = Counter()
    for run in runs:
        project, entity, mode = (run.config.get(f"logger.wandb.{k}") for k in WHERE)
        if project is not None and mode != "disabled" and (run.path / "wandb").is_dir():
            found[(project, entity, mode)] += 1
    if not found:
        return None
    (project, entity, mode), _ = found.most_common(1)[0]
    return {"project": project, "entity": entity, "mode": mode or "offline"}


def lr_table(entries: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """The LR-sensitivity table (analysis/lr_sweep.py) as wandb Table columns and rows."""
    columns = ["variant", "best_lr", "best_val_loss", "lr_sensitivity", "did_not_train", "edge",
               "lrs"]  # fmt: skip
    rows = [
        [e["label"], e.get("best_lr"), e.get("best_val_loss"),
         None if e.get("did_not_train") else e.get("lr_sensitivity"), bool(e.get("did_not_train")),
         e.get("edge"), ", ".join(f"{x:g}" for x in e["lrs"])]
        for e in entries
    ]  # fmt: skip
    return columns, rows


def report_run_id(out_dir: Path) -> str:
    """The wandb run id of a report dir: the same for every compare of that dir."""
    return "report-" + hashlib.sha1(str(out_dir.resolve()).encode()).hexdigest()[:16]


def artifact_name(group: str) -> str:
    """``report-<group>`` in the characters wandb allows in an artifact name."""
    return "report-" + re.sub(r"[^A-Za-z0-9_.-]", "_", group)


def log_report(
    report: dict[str, Any], out_dir: Path, table: tuple[list[str], list[list[str]]]
) -> str:
    """One wandb run holding the report (see the module docstring), in ``report["wandb"]``'s
    project; ``table``: report.table_cells'. Returns what to tell the user: where the offline
    run lies and how to upload it, or the online run's URL."""
    import wandb

    from data.hub import check_wandb_online

    target = report["wandb"]
    mode = os.environ.get("WANDB_MODE") or target["mode"]
    if mode == "disabled":
        return "wandb disabled (WANDB_MODE=disabled): no report run"
    check_wandb_online(mode)
    groups = report["wandb_groups"]
    group = groups[0] if groups else None  # single runs: the report run joins no group either
    columns, rows = table
    os.environ.setdefault("WANDB_SILENT", "true")
    replaced = superseded_offline_runs(out_dir) if mode == "offline" else []
    for old in replaced:  # derived from the sweep's runs: the new report run replaces it
        shutil.rmtree(old)
    run = wandb.init(
        project=target["project"],
        entity=target["entity"],
        id=report_run_id(out_dir),  # one report dir, one wandb run: a rerun updates it
        resume="allow",
        group=group,
        job_type="report",
        name="report",
        dir=str(out_dir),
        mode=mode,
        config={"sweep_dir": report["sweep_dir"], "variant_fields": report["variant_fields"]},
        settings=wandb.Settings(silent=True, console="off"),
    )
    try:
        artifact = wandb.Artifact(
            artifact_name(group or Path(report["sweep_dir"]).resolve().name),
            type="report",
            metadata={"n_runs": report["n_runs"], "variants": len(report["variants"])},
        )
        for name in (*REPORT_FILES, *report["plots"]):
            if (out_dir / name).is_file():
                artifact.add_file(str(out_dir / name), name=name)
        run.log_artifact(artifact, aliases=["latest"])
        logged: dict[str, Any] = {"report/variants": wandb.Table(columns=columns, data=rows)}
        if report.get("lr_sweep"):
            logged["report/lr_sweep"] = wandb.Table(*lr_table(report["lr_sweep"]))
        for name in report["plots"]:
            logged[f"report/{Path(name).stem}"] = wandb.Image(str(out_dir / name))
        run.log(logged)
        where = run.url if mode == "online" else None
    finally:
        run.finish()
    if where:
        return f"wandb report run: {where}"
    said = f"; replaced {len(replaced)} earlier offline report run" if replaced else ""
    return f"wandb report run (offline): wandb sync {out_dir / 'wandb' / 'offline-run-*'}{said}"


def superseded_offline_runs(out_dir: Path) -> list[Path]:
    """The earlier offline runs of this report dir's wandb id: offline, wandb makes a new run
    dir each time, and syncing two would upload one id twice."""
    found = (out_dir / "wandb").glob(f"offline-run-*-{report_run_id(out_dir)}")
    return sorted(p for p in found if p.is_dir())


# --- where the runs logged: their groups, the command that uploads them ----------------------
def wandb_groups(runs: list[Run], sweep_dir: Path) -> list[str]:
    """The wandb group of each run, most common first: what train.py recorded in summary.json,
    else its rule read back from disk (an explicit ``group``, else the sweep dir's last two
    parts)."""
    found = Counter()
    for run in runs:
        group = first_present([run.summary], ("wandb_group", "group"))
        group = group or first_present([run.config], ("group", "logger.wandb.group"))
        if not group:
            hydra = read_yaml_flat(run.path / runfiles.HYDRA_META, Warnings(), resolve=False)
            if hydra.get("hydra.mode") == "MULTIRUN":
                out = hydra.get("hydra.runtime.output_dir")
                parent = Path(str(out)).parent if out and "${" not in str(out) else sweep_dir
                group = runfiles.wandb_group(None, parent)
        if group and "${" not in str(group):
            found[str(group)] += 1
    return [g for g, _ in found.most_common()]  # none: single runs, in no group


def wandb_sync_pattern(sweep_dir: Path, skip: Path | None = None) -> str | None:
    """One shell glob covering the sweep's offline wandb runs (not the report's own run below
    ``skip``), or None if there are none."""
    dirs = [p for p in sweep_dir.rglob("offline-run-*") if p.is_dir() and p.parent.name == "wandb"]
    if skip is not None:
        dirs = [p for p in dirs if not p.is_relative_to(skip)]
    if not dirs:
        return None
    parts = [p.relative_to(sweep_dir).parts for p in dirs]
    if len({len(p) for p in parts}) > 1:
        return str(sweep_dir / "**" / "wandb" / "offline-run-*")
    # a component the runs differ in is "*", or "*=*" where every one is a job dir name
    # (key=value,...), which the report dir's name is not
    for wild in ("*", "*=*"):
        glob = [c[0] if len(set(c)) == 1 else wild if all(wild != "*=*" or "=" in x for x in c)
                else "*" for c in zip(*parts, strict=True)]  # fmt: skip
        glob[-1] = "offline-run-*"
        pattern = str(sweep_dir.joinpath(*glob))
        matched = [Path(m) for m in globlib.glob(pattern, recursive=True)]
        if skip is None or not any(m.is_relative_to(skip) for m in matched):
            return pattern
    if len(dirs) <= SYNC_LISTED:
        return " ".join(str(d) for d in sorted(dirs))
    return str(sweep_dir / "**" / "wandb" / "offline-run-*")  # the report's run comes too


SYNC_LISTED = 8  # more offline runs than this, and no glob leaves the report's out: a glob
