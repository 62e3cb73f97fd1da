"""Imports point one way: cli -> (integrations, openai_batch, bench) -> runner -> engine -> models -> layers
-> kernels, with shared leaf modules any layer may import; and no two modules import each other, even
through others. Every import counts: at the top, inside functions, and under TYPE_CHECKING."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Layers from the top down; a module may import its own layer's modules and any layer below.
LAYERS = [
    ("bulkinfer.cli", "bulkinfer", "bulkinfer.__main__"),  # the command line, and the package's public face
    ("bulkinfer.integrations", "bulkinfer.openai_batch", "bulkinfer.bench"),
    ("bulkinfer.runner",),
    ("bulkinfer.engine", "bulkinfer.sampling_params", "bulkinfer.structured_outputs_params", "bulkinfer.tool_params",
     "bulkinfer.outputs", "bulkinfer.pooling_params"),
    ("bulkinfer.models",),
    ("bulkinfer.layers",),
    ("bulkinfer.kernels",),
]
# Shared leaves: anyone may import them; they import no other bulkinfer module.
LEAVES = ("bulkinfer.errors", "bulkinfer.durable", "bulkinfer.settings")
# Siblings in one layer stay apart, except the engine's API types, which are the engine's own.
SAME_GROUP = {"bulkinfer.sampling_params": "bulkinfer.engine", "bulkinfer.structured_outputs_params": "bulkinfer.engine",
              "bulkinfer.tool_params": "bulkinfer.engine",
              "bulkinfer.outputs": "bulkinfer.engine", "bulkinfer.pooling_params": "bulkinfer.engine"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in (ROOT / "src" / "bulkinfer").rglob("*.py"):
        parts = path.relative_to(ROOT / "src").with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for path in (ROOT / "kernels").glob("*.py"):
        found["bulkinfer.kernels" + ("" if path.stem == "__init__" else f".{path.stem}")] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The bulkinfer modules `name` imports, anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            # `from package import module` names a module; `from module import name` the module itself.
            found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names)
    return {module for module in found if module in MODULES and module != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(module: str) -> tuple[int, str]:
    """The module's layer (0 is the top) and its group within the layer."""
    best = None
    for rank, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            # "bulkinfer" is the package's own __init__ alone; every other entry is a package and its modules.
            inside = module == prefix or (prefix != "bulkinfer" and module.startswith(prefix + "."))
            if inside and (best is None or len(prefix) > len(best[1])):
                best = (rank, prefix)
    assert best is not None, f"{module} is in no layer: add it to LAYERS or LEAVES"
    return best[0], SAME_GROUP.get(best[1], best[1])


def test_imports_point_down_the_stack():
    wrong = []
    for module, imported in GRAPH.items():
        for target in imported:
            if module in LEAVES:
                if target not in LEAVES:
                    wrong.append(f"{module} -> {target} (a shared leaf imports nothing of bulkinfer)")
                continue
            if target in LEAVES:
                continue
            (rank, group), (target_rank, target_group) = _layer(module), _layer(target)
            if target_rank < rank or (target_rank == rank and group != target_group and rank > 0):
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports that point up the stack or sideways:\n" + "\n".join(sorted(wrong))


def test_no_import_cycles():
    cycles = [sorted(component) for component in _strongly_connected(GRAPH) if len(component) > 1]
    assert not cycles, f"modules that import each other: {cycles}"


def test_the_check_sees_imports_inside_functions_and_type_checking_blocks(tmp_path: Path):
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bulkinfer.engine.llm import LLM\n"
              "def f():\n    from bulkinfer.runner.job import run_job\n")
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert _imports("bulkinfer.engine.probe", path) == {"bulkinfer.engine.llm", "bulkinfer.runner.job"}


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iteratively, so deep import chains cannot hit the recursion limit."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                components.append(component)
    return components
