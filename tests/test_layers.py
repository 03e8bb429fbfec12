"""The package's imports point down its layers and never run in a circle.

The layers, top to bottom (docs/design.md): cli > the package's API (`nmtkit/__init__.py`) > serve >
the verbs {train, translate, score, select, preprocess, average} > {decode, checkpoint} > models >
data > text > the leaves (errors, options, devices, signals, workers, io). Every import
counts, those inside functions and under TYPE_CHECKING too: a deferred import is still a
dependency, only a later one.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "nmtkit"

RANKS = {
    "__main__": 9, "cli": 8, "": 7, "serve": 6,
    "train": 5, "translate": 5, "score": 5, "select": 5, "preprocess": 5, "average": 5,
    "decode": 4, "checkpoint": 4, "models": 3, "data": 2.5, "text": 2,
}
LEAF = 1  # any other module or package directly under nmtkit/


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["nmtkit", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[tuple[str, str]]:
    """(imported nmtkit module, name) pairs of one import statement."""
    if isinstance(node, ast.Import):
        return [(alias.name, "") for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".")
        if MODULES[module].name != "__init__.py":
            package.pop()
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, base] if base else package)
    return [(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base, a.name) for a in node.names]


def _edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target, name in _targets(module, node):
                if not target.startswith("nmtkit"):
                    continue
                while target not in MODULES and "." in target:
                    target = target.rsplit(".", 1)[0]
                # the package's version: Python initialises the package before any of its modules
                if target == "nmtkit" and name == "__version__":
                    continue
                if target != module:
                    edges[module].add(target)
    return edges


def _rank(module: str) -> float:
    group = module.split(".")[1] if "." in module else ""
    return RANKS.get(group, LEAF)


def test_every_import_points_down_the_layers():
    upward = [f"{a} (layer {_rank(a)}) imports {b} (layer {_rank(b)})"
              for a, targets in sorted(_edges().items()) for b in sorted(targets)
              if _rank(b) >= _rank(a) and a.split(".")[:2] != b.split(".")[:2]
              and not (_rank(a) == _rank(b) == LEAF)]
    assert not upward, "imports that do not point down the layers:\n" + "\n".join(upward)


def test_no_import_circle():
    edges, state, circles = _edges(), {}, []

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                circles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert not circles, "import circles:\n" + "\n".join(circles)

