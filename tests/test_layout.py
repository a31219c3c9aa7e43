"""The package layout (README "Architecture"): bench's stages import only the stages below them,
with no import circle between modules or between packages (imports inside functions counted),
package __init__ files hand nothing on, and no function or module outgrows the limits. The package
face bench/__init__.py is the one exception: it imports the version (bench.provenance, standard
library only) and loads bench.api on first use of bench.run & co., so `import bench` stays light."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted([*ROOT.glob("bench/**/*.py"), *ROOT.glob("methods/*.py")])
# bench's parts from the bottom up: a part may import only the parts before it
STAGES = ["bench.errors", "bench.fileio", "bench.options", "bench.seeding", "bench.provenance", "bench.models", "bench.data",
          "bench.evaluation", "methods", "bench.config", "bench.tables", "bench.store", "bench.training", "bench.conformance",
          "bench.design", "bench.execution", "bench.reporting", "bench.api", "bench.cli", "bench.__main__"]
MAX_FUNCTION_LINES, MAX_MODULE_LINES = 60, 450


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in SOURCES}


def imported_modules(path: Path) -> set[str]:
    """Every bench or methods module this file imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from bench.data import ood_sets` imports the module bench.data.ood_sets
            found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                      for a in node.names}
    return {m for m in found if m in MODULES}


def stage_of(module: str) -> str:
    stage = max((s for s in STAGES if module == s or module.startswith(s + ".")), key=len, default=None)
    assert stage is not None, f"{module} belongs to no stage of STAGES: give it one"
    return stage


def test_every_import_points_down_the_stages():
    upward = []
    for module, path in MODULES.items():
        if module == "bench":  # the package face: `import bench` stays light, the API loads on first use
            continue
        for target in imported_modules(path):
            if target == "bench":
                upward.append(f"{module} imports the package face bench")
            elif STAGES.index(stage_of(target)) > STAGES.index(stage_of(module)):
                upward.append(f"{module} -> {target}")
    assert not upward, "imports that point up the stages: " + "; ".join(sorted(upward))


def test_no_import_circle_between_modules():
    graph = {m: imported_modules(p) - {m} for m, p in MODULES.items() if m != "bench"}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                pytest.fail("import circle: " + " -> ".join(trail[trail.index(nxt):] + [node, nxt]))
            if nxt not in state:
                visit(nxt, trail + [node])
        state[node] = 2

    for module in graph:
        if module not in state:
            visit(module, [])


@pytest.mark.parametrize("package", sorted(m for m, p in MODULES.items() if p.name == "__init__.py" and m != "bench"))
def test_package_faces_hand_nothing_on(package):
    body = ast.parse(MODULES[package].read_text()).body
    if package == "methods":  # the registry lives in methods/__init__.py by design (docs/methods.md)
        return
    assert all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body), \
        f"{package}/__init__.py should hold its docstring only; import from the module that defines a name"


def test_no_function_or_module_over_the_limits():
    over = []
    for path in SOURCES:
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            over.append(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if node.end_lineno - start + 1 > MAX_FUNCTION_LINES:
                    over.append(f"{path.relative_to(ROOT)}:{node.name}: {node.end_lineno - start + 1} lines")
    assert not over, "over the limits: " + "; ".join(over)
