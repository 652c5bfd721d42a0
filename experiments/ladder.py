"""A finding at several sizes: ``python scripts/reproduce.py <finding> --ladder``. Each rung of
the experiment's ``reproduce.ladder`` (overrides that set one size; the experiment's yaml says
the rule that scales them) runs the finding's whole protocol into its own sweep dir,
``<sweep dir>/ladder/rung<k>``: the grid that picks the rates, then the finding's frozen fresh
seeds at its declared n, each claim decided by its frozen rules (a rung other than the frozen
size is exploratory, and says so). Then each effect's trend over the rungs
(analysis/findings/trend.py: the slope per doubling of parameters, with its interval) goes into
``ladder.json``, ``ladder.md`` and ``ladder.png`` beside the rungs; ``--publish DIR`` copies them
and each rung's verdict.json into ``DIR/ladder/``. It resumes as reproduce does: a finished rung
is read, not run again.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
from pathlib import Path
from typing import Any

from analysis.findings import ALIASES, FINDINGS
from analysis.findings.settings import read_reproduce
from analysis.findings.trend import ladder_trends
from experiments.sweep import compose, console
from experiments.verdicts import read_verdict, verdict_stem
from runs.runfiles import SUMMARY, write_atomic

LADDER = "ladder"


def run(args: argparse.Namespace, reproduce_main: Any, sweeps: Path) -> int:
    """Every rung through reproduce's own flow, then the trends (or, with --dry-run, the plan)."""
    name = ALIASES.get(args.finding, args.finding)
    finding = FINDINGS[name]
    experiment = finding.experiment + ("_gpu" if args.size == "gpu" else "")
    rungs = read_reproduce(compose(experiment, args.overrides)).ladder
    if len(rungs) < 3:
        console.print(f"error: {experiment} declares {len(rungs)} ladder rungs; a trend needs "
                      "three or more (reproduce.ladder in its yaml)", markup=False)  # fmt: skip
        return 1
    base = (args.out or sweeps / experiment).resolve() / LADDER
    code = 0
    for k, rung in enumerate(rungs):
        console.print(f"[bold]rung {k}[/]: {' '.join(rung) or 'the frozen size'}")
        argv = [args.finding, "--size", args.size, "--out", str(base / f"rung{k}"), "--rung",
                *(["--dry-run"] if args.dry_run else []), *rung, *args.overrides]  # fmt: skip
        code = max(code, reproduce_main(argv))
    if args.dry_run:
        return code
    record = summarize(name, experiment, base, rungs)
    write(base, record)
    if args.publish:
        publish(base, args.publish / LADDER, name, len(rungs))
    console.print(f"ladder: {base / 'ladder.md'}")
    return code


def rung_size(out: Path) -> dict[str, float]:
    """The rung's model size and run length: the median parameter count and steps of its runs."""
    found = []
    for path in out.glob(f"*/{SUMMARY}"):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    params = [s["params"] for s in found if isinstance(s.get("params"), int | float)]
    steps = [s["steps"] for s in found if isinstance(s.get("steps"), int | float)]
    if not params:
        raise SystemExit(f"error: {out} holds no finished run to size the rung by; run it again")
    return {"size": statistics.median(params), "steps": statistics.median(steps) if steps else 0}


def summarize(name: str, experiment: str, base: Path, rungs: list[list[str]]) -> dict[str, Any]:
    read = []
    for k, overrides in enumerate(rungs):
        out = base / f"rung{k}"
        verdict = read_verdict(out / f"{verdict_stem(name)}.json")
        if verdict is None:
            raise SystemExit(f"error: rung {k} ({out}) has no verdict: run the ladder again")
        read.append({"overrides": overrides, **rung_size(out), "claims": verdict["claims"],
                     "mode": verdict.get("exploratory") or "the frozen size"})  # fmt: skip
    return {"finding": name, "experiment": experiment, "rungs": read, "trends": ladder_trends(read)}


def markdown(record: dict[str, Any]) -> str:
    lines = [f"# {record['finding']}: its effects over a ladder of sizes", "",
             "| rung | overrides | parameters | steps |", "|---|---|---|---|"]  # fmt: skip
    for k, r in enumerate(record["rungs"]):
        lines.append(f"| {k} | {' '.join(r['overrides']) or '(frozen size)'} | "
                     f"{r['size']:,.0f} | {r['steps']:,.0f} |")  # fmt: skip
    lines += ["", "| claim | effect | per rung | slope per doubling [95%] | trend |",
              "|---|---|---|---|---|"]  # fmt: skip
    for t in record["trends"]:
        per = "; ".join(f"{r['effect']:.4g} [{r['lo']:.4g}, {r['hi']:.4g}]" if r["lo"] is not None
                        else "–" for r in t["rungs"])  # fmt: skip
        factor = "x" if t.get("scale") == "log" else ""
        slope = (f"{factor}{t['slope']:.4g} [{factor}{t['lo']:.4g}, {factor}{t['hi']:.4g}]"
                 if t["slope"] is not None else "–")  # fmt: skip
        lines.append(f"| {t['claim']} | {t['effect']} | {per} | {slope} | {t['trend']} |")
    return "\n".join(lines) + "\n"


def figure(record: dict[str, Any], path: Path) -> None:
    """Each effect against the parameter count, its rungs' intervals and the fitted trend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trends = record["trends"]
    fig, axes = plt.subplots(len(trends), 1, figsize=(6, 2.6 * len(trends)), squeeze=False)
    for ax, t in zip(axes[:, 0], trends, strict=True):
        shown = [r for r in t["rungs"] if r["lo"] is not None]
        x = [r["size"] for r in shown]
        y = [r["effect"] for r in shown]
        err = [[r["effect"] - r["lo"] for r in shown], [r["hi"] - r["effect"] for r in shown]]
        ax.errorbar(x, y, yerr=err, fmt="o", capsize=3)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{t['claim']}: {t['trend']}", fontsize=9)
        ax.set_xlabel("parameters")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(base: Path, record: dict[str, Any]) -> None:
    write_atomic(base / "ladder.json", json.dumps(record, indent=2, default=str) + "\n")
    write_atomic(base / "ladder.md", markdown(record))
    figure(record, base / "ladder.png")


def publish(base: Path, dest: Path, name: str, rungs: int) -> None:
    """ladder.json/.md/.png and each rung's verdict.json (recomputable on its own) into dest."""
    dest.mkdir(parents=True, exist_ok=True)
    for file in ("ladder.json", "ladder.md", "ladder.png"):
        shutil.copy2(base / file, dest / file)
    for k in range(rungs):
        (dest / f"rung{k}").mkdir(exist_ok=True)
        shutil.copy2(base / f"rung{k}" / f"{verdict_stem(name)}.json",
                     dest / f"rung{k}" / "verdict.json")  # fmt: skip
    console.print(f"published the ladder to {dest}", markup=False)
