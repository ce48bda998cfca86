"""The shape the design promises, checked on the code itself.

- the scheduler core is pure: its whole import closure stays inside marlaas.core, uses only
  an allow-list of side-effect-free standard modules plus pydantic and numpy, and never
  opens a file; importing it loads no simulator, executor, I/O or clock module;
- no import cycles between marlaas modules (imports inside functions count);
- one driver loop: only marlaas.drive.loop asks a scheduler to decide or feeds it events.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "marlaas"
PURE_STDLIB = {
    "__future__", "abc", "bisect", "collections", "dataclasses", "enum", "functools", "heapq",
    "itertools", "math", "operator", "typing",
}  # fmt: skip
PURE_THIRD_PARTY = {"numpy", "pydantic", "mypy_extensions"}  # mypyc_attr only marks a class
CHOOSER = "marlaas.compiled"
"""Which build of the core runs, compiled or its sources: called by marlaas/core/__init__.py
before any core module loads (standard library only; not the core's own logic)."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str) -> set[str]:
    """Every module ``name`` imports, anywhere in its body (absolute names)."""
    tree = ast.parse(MODULES[name].read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # "from pkg import submodule" imports the submodule; "from pkg import name" pkg
            submodules = {f"{node.module}.{a.name}" for a in node.names} & MODULES.keys()
            found.update(submodules)
            if len(submodules) < len(node.names):
                found.add(node.module)
    return found


def internal_edges() -> dict[str, set[str]]:
    return {name: {m for m in imports_of(name) if m in MODULES} for name in MODULES}


def test_core_import_closure_is_pure():
    closure, todo = set(), [m for m in MODULES if m.startswith("marlaas.core")]
    while todo:
        name = todo.pop()
        if name in closure:
            continue
        closure.add(name)
        for imported in imports_of(name):
            root = imported.split(".")[0]
            if imported == CHOOSER and name == "marlaas.core":
                continue
            if imported in MODULES or root == "marlaas":
                assert imported.startswith("marlaas.core"), f"{name} imports {imported}"
                if imported in MODULES:
                    todo.append(imported)
            else:
                assert root in PURE_STDLIB | PURE_THIRD_PARTY, f"{name} imports {imported}"
        tree = ast.parse(MODULES[name].read_text())
        calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Name)}  # fmt: skip
        assert not calls & {"open", "print", "input", "eval", "exec"}, f"{name}: {calls}"
    assert "marlaas.core.scheduler" in closure


def test_importing_the_core_loads_nothing_impure():
    code = (
        "import sys, marlaas.core.scheduler, marlaas.core.workload\n"
        "print(' '.join(sorted(sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    chooser = ("marlaas", CHOOSER)  # compiled or plain core: standard library only
    ours = [m for m in loaded if m.startswith("marlaas.") and m not in chooser]
    assert all(m.startswith("marlaas.core") for m in ours), ours
    heavy = {"simpy", "torch", "vllm", "yaml", "pandas", "pyarrow", "asyncio", "tqdm"}
    assert not heavy & {m.split(".")[0] for m in loaded}


def test_no_import_cycles():
    edges = internal_edges()
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in sorted(edges):
        if name not in index:
            visit(name)
    assert not cycles, cycles


def test_one_driver_loop():
    callers = set()
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("decide", "on_event")
            ):
                callers.add(name)
    assert callers == {"marlaas.drive.loop"}, callers
