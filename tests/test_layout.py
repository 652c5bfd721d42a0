"""The house rules of the tree: no import cycles anywhere, and dependencies point one way,
scripts -> training -> (models, data); models/ imports only torch and itself."""

from __future__ import annotations

import ast
import sys

from tests.conftest import ROOT
from tests.helpers import find_cycle

PACKAGES = ("models", "data", "training", "scripts")


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
        "data": {"data"},
        "training": {"training", "models", "data"},
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
