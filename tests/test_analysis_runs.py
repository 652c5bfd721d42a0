"""analysis/runs.py, the readers every analysis module shares, and the import graph of
analysis/ and scripts/: runs.py is a leaf, and no module imports another that imports it back."""

from __future__ import annotations

import ast
import importlib
import json
import math
import sys
from pathlib import Path

import pytest

from analysis import runs
from runs.numbers import log_slope
from runs.record import FINISHED
from runs.runfiles import flatten
from tests.helpers import find_cycle

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("analysis", "scripts")


def scripts_imports() -> dict[str, set[str]]:
    """module -> the analysis.* and scripts.* modules it imports, deferred (in-function)
    imports included."""
    graph: dict[str, set[str]] = {}
    for path in sorted(p for room in ROOMS for p in (ROOT / room).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        graph[name] = found
    return {m: {i for i in deps if i in graph and i != m} for m, deps in graph.items()}


def test_scripts_import_graph_has_no_cycle_and_runs_is_a_leaf() -> None:
    graph = scripts_imports()
    assert {"analysis.runs", "analysis.report", "scripts.bench.core"} <= set(graph)
    assert graph["analysis.runs"] == set()
    assert find_cycle(graph) is None
    # The check can fail: a deferred import of report.py inside plots.py closes a cycle.
    graph["analysis.plots"].add("analysis.report")
    assert find_cycle(graph) == [
        "analysis.plots",
        "analysis.report",
        "analysis.plots",
    ]


def test_every_scripts_module_imports_alone() -> None:
    """Each module imported first, into a fresh ``scripts`` package: a cycle that only bites
    from one entry point (a submodule importing its package's __init__) fails here."""
    saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] in ROOMS}
    try:
        for module in sorted(scripts_imports()):
            if module.endswith("__main__"):
                continue  # runs the benchmark
            for name in [k for k in sys.modules if k.split(".")[0] in ROOMS]:
                del sys.modules[name]
            importlib.import_module(module)
    finally:  # the other tests keep the module objects they imported
        for name in [k for k in sys.modules if k.split(".")[0] in ROOMS]:
            del sys.modules[name]
        sys.modules.update(saved)


def test_read_metrics_sparse_rows(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    path.write_text("epoch,step,train/loss,val/loss\n0,0,2.5,\n0,1,nan,\n0,1,,2.25\n0,2,2.0,\n")
    series = runs.read_metrics(path, runs.Warnings())
    assert series == {"train/loss": [(0, 2.5), (2, 2.0)], "val/loss": [(1, 2.25)]}
    assert runs.run_series(tmp_path, "val/loss") == [(1, 2.25)]
    assert runs.run_series(tmp_path / "absent", "val/loss") == []


def test_read_summary_tells_absent_from_unreadable(tmp_path: Path) -> None:
    assert runs.run_summary(tmp_path) is None  # running, or killed before writing it
    (tmp_path / "summary.json").write_text('{"status": "compl')
    warn = runs.Warnings(quiet=True)
    assert runs.run_summary(tmp_path, warn) == {}
    assert runs.status_of({}) == runs.UNFINISHED and "unreadable JSON" in warn[0]
    (tmp_path / "summary.json").write_text(json.dumps({"status": "failed", "error": "x"}))
    assert runs.status_of(runs.run_summary(tmp_path)) == "failed"
    assert "failed" not in FINISHED


def test_flatten_joins_keys_and_keeps_leaf_dicts() -> None:
    node = {"a": {"b": 1, "c": {"d": [1, 2]}}, "m": {"mean": 2.0, "std": 0.1}}
    assert flatten(node) == {"a.b": 1, "a.c.d": [1, 2], "m.mean": 2.0, "m.std": 0.1}
    assert flatten(node, sep="/", leaf=lambda d: "mean" in d) == {
        "a/b": 1,
        "a/c/d": [1, 2],
        "m": {"mean": 2.0, "std": 0.1},
    }
    assert runs.freeze({"x": [1, [2, 3]]}) == (("x", (1, (2, 3))),)


def test_log_slope_recovers_a_power_law() -> None:
    xs = [6, 12, 24, 48]
    assert log_slope(xs, [0.2 * x**-0.5 for x in xs]) == pytest.approx(-0.5)
    # against a hand fit of two points: slope = log(y2/y1) / log(x2/x1)
    assert log_slope([2, 8], [3, 12]) == pytest.approx(math.log(4) / math.log(4))
