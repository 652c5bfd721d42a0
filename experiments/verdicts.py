"""A finding's verdicts on disk and on screen: verdict.md / verdict.json in the sweep dir, the
console table, the copy published under docs/findings/<id>/, and the times a verdict records
(``Clock``: wall and CPU time, the machine's load)."""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from analysis.findings import FINDINGS, VERDICTS
from analysis.findings.verdict_text import arms, cell, effects, fmt
from analysis.variants import md_cell
from experiments.sweep import console
from runs.record import FINISHED
from runs.runfiles import write_atomic


# --- verdicts ------------------------------------------------------------------------------------
def over(record: dict) -> str:
    return f" over {record['launches']} launches" if record.get("launches", 1) > 1 else ""


def counts(claims: list[dict], key: str) -> str:
    found = [c[key] for c in claims if c["counted"]]
    return ", ".join(f"{found.count(s)} {s}" for s in VERDICTS if found.count(s))


def gated(verdict: dict) -> str:
    """What a gated claim's effects measured, shown beside its NOT TESTABLE."""
    before = verdict.get("before_gate")
    return f" (measured: {before}, before the gate)" if before else ""


def verdict_markdown(record: dict) -> str:
    if record["kind"] == "init_probe":
        what = f"{record['n_runs']} init-probe jobs (scripts/init_probe.py, no training)"
    else:
        what = f"{record['n_runs']} runs ({fmt(record['run_status']) or 'none finished'})"
    claims = record["claims"]
    lines = [
        f"# {record['title']}",
        "",
        f"Command: `{record['command']}`  ",
        f"Sweep: `experiment={record['experiment']}`, {what}.  ",
        f"Time: {record['wall_s'] / 60:.1f} min wall{over(record)} on {record['cpus']} CPUs at "
        f"load average {record['load_start']:.1f} -> {record['load_end']:.1f}; "
        f"{record['cpu_s'] / 60:.1f} CPU-min in all.  ",
        *(
            [f"**Exploratory**: {record['exploratory']}; no verdict here is confirmatory.  "]
            if record.get("exploratory")
            else []
        ),  # fmt: skip
        f"Registry {record['registry']}. Verdicts (counted claims): {counts(claims, 'status')}; "
        f"Holm-adjusted within the finding: {counts(claims, 'holm_status')}. Report and plots: "
        "[report/report.md](report/report.md).",
        "",
        "| claim | statement (source) | rule | effects | arms | verdict | Holm | mode |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in claims:
        statement = f"{c['statement']} ({c['source']})" + (
            "" if c["counted"] else " [check, not counted]"
        )
        rule = c["rule"] + (f"; departs: {c['departs']}" if c["departs"] else "")
        note = f" {c['note']}" if c["note"] else ""
        cells = [c["id"], statement, rule, effects(c["effects"]) + note, arms(c["arms"]),
                 f"**{c['status']}**" + gated(c), c["holm_status"], c["mode"]]  # fmt: skip
        lines.append("| " + " | ".join(cell(x) for x in cells) + " |")
    lines += [
        "",
        "Every per-run value these verdicts read is in verdict.json's `table`; "
        "`python scripts/reproduce.py --recompute <dir>` decides them again from it "
        "(analysis/findings/judge.py says how).",
    ]
    left_out = {s: n for s, n in record["run_status"].items() if s not in FINISHED}
    if left_out:
        lines += [
            "",
            f"Left out of every verdict (neither completed nor diverged): {fmt(left_out)}.",
        ]
    if record.get("left_out"):
        lines += ["", "Not pooled as seeds (report.md's warnings):", ""]
        lines += [f"- {md_cell(line)}" for line in record["left_out"]]
    return "\n".join(lines) + "\n"


def verdict_stem(finding: str) -> str:
    """verdict for the first finding of an experiment; verdict_<finding> for another finding
    that reads the same sweep (F13 reads F6's), so neither overwrites the other."""
    experiment = FINDINGS[finding].experiment
    first = next(k for k, f in FINDINGS.items() if f.experiment == experiment)
    return "verdict" if finding == first else f"verdict_{finding}"


def write_verdicts(out: Path, record: dict) -> None:
    """verdict.json and verdict.md in ``out``, named for the finding (verdict_stem)."""
    write_record(out / f"{verdict_stem(record['finding'])}.json", record)


def write_record(path: Path, record: dict) -> None:
    """``path`` (a verdict .json) and its .md, each through a temporary file and a rename: a
    full disk mid-write leaves the earlier record (the only one of earlier launches' times)
    whole."""
    write_atomic(path, json.dumps(record, indent=2, default=str) + "\n")
    write_atomic(path.with_suffix(".md"), verdict_markdown(record))


def read_verdict(path: Path) -> dict | None:
    """An earlier verdict.json (None when there is none); a cut or garbled one is one line."""
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise SystemExit(
            f"error: {path} cannot be read ({type(err).__name__}: {err}); move it aside "
            "(the runs' own records are intact) and run the command again"
        ) from None
    if not isinstance(record, dict):
        raise SystemExit(f"error: {path} is not a verdict record; move it aside and rerun")
    return record


PUBLISHED = ".published.json"  # in a publish dir: the finding, experiment and files publish wrote
# What publish ever writes (the report's figures besides): the only names its manifest may
# delete, whatever a hand-edited or merged manifest lists.
PUBLISHES = ("verdict.md", "verdict.json", "report/report.md", "report/report.json")
CARDS = "report/cards.md"  # the stability cards, when the report keeps them apart


def own_file(dest: Path, name: Any) -> bool:
    """Whether ``name`` (from a manifest) is a file publish writes, inside ``dest``."""
    if not isinstance(name, str) or Path(name).is_absolute() or ".." in Path(name).parts:
        return False
    figures = {p for f in FINDINGS.values() for p in f.plots}
    writes = name in (*PUBLISHES, CARDS) or (name.startswith("report/") and name[7:] in figures)
    return writes and (dest / name).resolve().is_relative_to(dest.resolve())


def publish(out: Path, dest: Path, finding: str, plots: tuple[str, ...], stem: str) -> None:
    """verdict.md/.json, report/report.md/.json (each run's values, seed by seed) and the key
    plots into ``dest`` (e.g. docs/findings/f3), the sweep dir written as
    multirun/reproduce/<experiment> and other plots left out.

    All or nothing: the new dest is assembled in a temporary sibling (what dest holds, less
    this finding's earlier files, plus the new ones) and swapped in by renames, so a full disk
    leaves the published copy as it was. Never deletes a file it did not write (the manifest
    lists them; a name outside dest or not one publish writes is never touched), names every
    file it replaces, and refuses a dest inside the sweep dir or holding another finding's."""
    experiment = FINDINGS[finding].experiment
    if dest.exists() and not dest.is_dir():
        raise SystemExit(
            f"error: --publish takes a directory and {dest} is a file; publish into its "
            f"directory (e.g. --publish {dest.parent})"
        )
    if dest.resolve().is_relative_to(out.resolve()):
        raise SystemExit(
            f"error: --publish {dest} is inside the sweep dir {out}; publish elsewhere"
        )
    manifest = dest / PUBLISHED
    try:
        before = json.loads(manifest.read_text()) if manifest.is_file() else {}
    except (OSError, ValueError):
        before = {}
    before = before if isinstance(before, dict) else {}
    held = before.get("finding") or published_finding(dest)
    other = before.get("experiment") not in (None, experiment)
    if held not in (None, finding) or (held is None and other):
        owner = held or f"experiment={before['experiment']}"
        raise SystemExit(
            f"error: {dest} holds the published {owner}; publish {finding} into its own "
            f"directory (e.g. --publish {dest.parent / finding})"
        )
    if other:  # the same finding, re-declared on another experiment
        print(f"note: {dest} held {finding} from experiment={before['experiment']}; its files "
              f"are replaced by experiment={experiment}'s (git keeps the old ones)")  # fmt: skip
    shown = [name for name in plots if (out / "report" / name).is_file()]
    cards = [CARDS] if (out / CARDS).is_file() else []
    files = [*PUBLISHES, *cards, *(f"report/{n}" for n in shown)]
    replaced = [f for f in files if (dest / f).is_file()]
    stale = {f for f in before.get("files", []) if own_file(dest, f)} - set(files)
    canonical = f"multirun/reproduce/{experiment}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{dest.name}.publishing-", dir=dest.parent))
    # mkdtemp's 0700 would become dest's: keep dest's own mode, or the user's umask's
    os.chmod(stage, dest.stat().st_mode & 0o777 if dest.is_dir() else 0o777 & ~current_umask())
    try:
        if dest.is_dir():
            shutil.copytree(dest, stage, dirs_exist_ok=True, symlinks=True)
        for name in stale:
            (stage / name).unlink(missing_ok=True)
        (stage / "report").mkdir(exist_ok=True)
        for name in shown:
            shutil.copyfile(out / "report" / name, stage / "report" / name)
        lines = (out / "report" / "report.md").read_text().splitlines()
        keep = [x for x in lines if not x.startswith("![") or any(f"({n})" in x for n in shown)]
        keep = [x for x in keep if not x.startswith("Upload the offline wandb runs")]
        text = "\n".join(keep).replace(str(out), canonical) + "\n"
        (stage / "report" / "report.md").write_text(text)
        for src, name in (
            (out / f"{stem}.md", "verdict.md"),
            (out / f"{stem}.json", "verdict.json"),
            (out / "report" / "report.json", "report/report.json"),
            *((out / name, name) for name in cards),  # report.md links them
        ):
            (stage / name).write_text(src.read_text().replace(str(out), canonical))
        record = {"finding": finding, "experiment": experiment, "files": files}
        (stage / PUBLISHED).write_text(json.dumps(record, indent=1) + "\n")
        swap(stage, dest)
    except OSError as err:
        shutil.rmtree(stage, ignore_errors=True)
        raise SystemExit(
            f"error: publishing into {dest} failed ({err.strerror or err}); {dest} is as it "
            "was; free space or fix its permissions and rerun with --publish"
        ) from None
    console.print(f"published to {dest}: {', '.join(files)}")
    if replaced:
        console.print(f"  replaced: {', '.join(replaced)}")


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def published_finding(dest: Path) -> str | None:
    """The finding a publish dir holds, from its verdict.json (manifests before 2026-12 lack it)."""
    try:
        record = json.loads((dest / "verdict.json").read_text())
    except (OSError, ValueError):
        return None
    return record.get("finding") if isinstance(record, dict) else None


def swap(new: Path, dest: Path) -> None:
    """Put the directory ``new`` in ``dest``'s place by renames (the old one removed last)."""
    old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
    if dest.exists():
        os.replace(dest, old)
    try:
        os.replace(new, dest)
    except OSError:
        if old.exists():
            os.replace(old, dest)
        raise
    shutil.rmtree(old, ignore_errors=True)


def show(verdicts: list[dict]) -> None:
    table = Table("claim", "statement", "effects [95% interval]", "verdict", "Holm")
    colors = {"PASS": "green", "FAIL": "red", "INCONCLUSIVE": "magenta", "NOT TESTABLE": "blue"}
    for v in verdicts:
        shown = escape(effects(v["effects"]) + (f"; {v['note']}" if v["note"] else ""))
        color = colors.get(v["status"], "yellow")
        table.add_row(v["id"], v["statement"], shown, f"[{color}]{v['status']}", v["holm_status"])
    console.print(table)


def cpu_seconds() -> float:
    """CPU time of this process and every finished subprocess (the sweep's jobs included)."""
    import resource

    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def finite_load() -> float:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    return round(load, 2)


class Clock:
    """This command's wall and CPU time (its sweep's jobs included) and the machine's load."""

    def __init__(self) -> None:
        self.load_start = finite_load()
        self.start, self.cpu_start = time.perf_counter(), cpu_seconds()

    def wall(self) -> float:
        return time.perf_counter() - self.start

    def cpu(self) -> float:
        return cpu_seconds() - self.cpu_start

    def times(self) -> dict[str, Any]:
        return {
            "wall_s": round(self.wall(), 1),
            "cpu_s": round(self.cpu(), 1),
            "cpus": os.cpu_count(),
            "load_start": self.load_start,
            "load_end": finite_load(),
        }


def extended(earlier: dict, wall: float, cpu: float, command: str) -> dict[str, Any]:
    """A launch into a sweep dir that holds an earlier launch's record (a resumed or extended
    sweep, e.g. a widened grid): the times add up, and a new command joins the earlier one."""
    said = earlier["command"]
    return {
        "wall_s": round(earlier["wall_s"] + wall, 1),
        "cpu_s": round(earlier["cpu_s"] + cpu, 1),
        "load_start": earlier.get("load_start", math.nan),
        "command": said if command in said else f"{said}; then {command}",
        "launches": earlier.get("launches", 1) + 1,
    }


def exit_status(runs: list[dict], code: int, out: Path) -> int:
    """1 when a run of the sweep neither completed nor diverged (its verdicts left it out)."""
    failed = [r for r in runs if r["status"] not in FINISHED]
    if failed or code != 0:
        what = ", ".join(f"{Path(r['run_dir']).name} ({r['status']})" for r in failed)
        console.print(
            f"error: {len(failed)} of {len(runs)} runs did not finish ({what or f'exit {code}'}); "
            f"verdicts use the completed and diverged runs only; see {out / 'sweep.log'}",
            markup=False,
        )
        return 1
    return 0
