"""The house rules of the tree: no import cycles anywhere, and dependencies point one way,
scripts -> experiments -> analysis -> runs (the run-dir contract), scripts -> training ->
(models, data, runs); models/ imports only torch and itself; runs/ imports no other package of
ours and neither torch nor Lightning; neither the analysis nor the experiments import training/
or load torch or Lightning; a run dir's file names are spelled only in runs/runfiles.py."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

from tests.conftest import ROOT
from tests.helpers import find_cycle

PACKAGES = ("models", "data", "runs", "training", "analysis", "experiments", "scripts")


def module_name(path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_imports() -> dict[str, set[str]]:
    """module -> every module it imports (top-level names and deferred imports alike);
    ``from pkg import submodule`` depends on the submodule, not on the package."""
    paths = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    paths.append(ROOT / "train.py")
    modules = {module_name(p) for p in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = {f"{node.module}.{a.name}" for a in node.names} & modules
                found |= subs or {node.module}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        graph[module_name(path)] = found
    return graph


def test_no_import_cycle_in_the_project():
    graph = project_imports()
    internal = {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}
    assert find_cycle(internal) is None


def test_dependencies_point_one_way():
    allowed = {
        "models": {"models"},
        "data": {"data", "runs"},  # runs.runfiles.write_atomic: the token cache's meta
        "runs": {"runs"},
        "training": {"training", "models", "data", "runs"},
        "analysis": {"analysis", "runs", "data"},  # data.hub: is wandb online
        "experiments": {"experiments", "analysis", "runs", "models"},  # models.flops: estimates
    }
    for module, deps in project_imports().items():
        package = module.split(".")[0]
        ours = {d.split(".")[0] for d in deps if d.split(".")[0] in (*PACKAGES, "train")}
        if package in allowed:
            assert ours <= allowed[package], f"{module} imports {ours - allowed[package]}"


def test_models_import_only_torch_and_the_standard_library():
    # ninja: the build tool torch's extension loader runs for the fused kernel (models/kernels.py)
    stdlib = set(sys.stdlib_module_names) | {"ninja"}
    for module, deps in project_imports().items():
        if module.split(".")[0] != "models":
            continue
        roots = {d.split(".")[0] for d in deps} - {"models", "__future__"}
        assert roots <= {"torch"} | stdlib, f"{module} imports {roots - stdlib - {'torch'}}"


def test_the_contract_the_analysis_and_the_experiments_load_neither_torch_nor_lightning():
    """analysis/ reads run dirs through the torch-free contract (runs/record.py,
    runs/runfiles.py), and experiments/ launches train.py in a subprocess: a report, a
    verdict or a sweep's estimate never waits on torch's import."""
    rooms = ("runs", "analysis", "experiments")
    modules = sorted(m for m in project_imports() if m.split(".")[0] in rooms)
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(sorted({'torch', 'lightning'} & {m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"importing {rooms} loaded {out.stdout.strip()}"


RUN_FILES = (
    "summary.json", "metrics.csv", "last.ckpt", "probe.json", "vocab.json", ".hydra/config.yaml"
)  # fmt: skip
OWNER = "runs/runfiles.py"


def string_constants(tree: ast.AST) -> list[ast.Constant]:
    """Every str constant in the module except docstrings (prose may name a file)."""
    docs = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            docs.add(id(first.value))
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def test_run_dir_file_names_are_spelled_only_by_their_owner():
    # data/ names its token cache's own files (a cache entry is not a run dir)
    rooms = [
        p
        for pkg in ("runs", "training", "analysis", "experiments", "scripts")
        for p in (ROOT / pkg).rglob("*.py")
    ]
    found = []
    for path in [*rooms, ROOT / "train.py"]:
        if path.relative_to(ROOT).as_posix() == OWNER:
            continue
        for node in string_constants(ast.parse(path.read_text())):
            if node.value == ".hydra" or any(node.value.endswith(name) for name in RUN_FILES):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert not found, f"use the names in {OWNER}: " + "; ".join(found)


def test_the_owner_names_every_run_file():
    from runs import runfiles

    named = {runfiles.SUMMARY, runfiles.METRICS, runfiles.CHECKPOINT, runfiles.PROBE}
    named |= {runfiles.VOCAB, runfiles.CONFIG}
    assert named == set(RUN_FILES)


def test_probe_metric_names_are_spelled_only_by_their_owner():
    """The probes write and the analysis reads the names in runs/metric_names.py: a name
    restated as a string in a reader drifts from its writer unseen."""
    from runs import metric_names

    spelled = {
        v for k, v in vars(metric_names).items() if k.isupper() and isinstance(v, str) and "/" in v
    }
    rooms = [*(ROOT / "analysis").rglob("*.py"), *(ROOT / "training" / "probes").rglob("*.py")]
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}"
        for path in rooms
        for node in string_constants(ast.parse(path.read_text()))
        if node.value in spelled
    ]
    assert not found, "use runs/metric_names.py: " + "; ".join(found)


def test_no_generic_top_level_name_is_installed(tmp_path):
    """normlab runs from its checkout and installs only its dependencies: outside the checkout
    none of its package names resolves (no `data` or `models` of ours shadows another's in
    site-packages, and two checkouts sharing a venv never run each other's code)."""
    code = (
        "import importlib.util, json, sys\n"
        f"print(json.dumps([m for m in {PACKAGES!r} if importlib.util.find_spec(m)]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
