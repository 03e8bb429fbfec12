"""Size limits of the package's code: no module over 600 lines, no function over 60, no module docstring over 12.

A module is sized by its concept: one past 600 lines holds more than one, and a function past 60
does more than one job; either is split along its seams (slivers are folded, not split further). Lines are counted as the file has them (docstrings and
comments included); a function counts from its `def` line to its last line.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "nmtkit"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60


def oversized(root: Path = PACKAGE) -> tuple[list[str], list[str]]:
    """(modules over MAX_MODULE_LINES, functions over MAX_FUNCTION_LINES), each as a readable
    'path: N lines' / 'path:line name: N lines'."""
    modules, functions = [], []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(root.parent)
        n = len(text.splitlines())
        if n > MAX_MODULE_LINES:
            modules.append(f"{rel}: {n} lines")
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    functions.append(f"{rel}:{node.lineno} {node.name}: {length} lines")
    return modules, functions


def test_no_module_is_over_600_lines():
    modules, _ = oversized()
    assert not modules, f"modules over {MAX_MODULE_LINES} lines: " + "; ".join(modules)


def test_no_function_is_over_60_lines():
    _, functions = oversized()
    assert not functions, f"functions over {MAX_FUNCTION_LINES} lines: " + "; ".join(functions)


def test_the_walk_finds_an_oversized_module_and_function(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (pkg / "big.py").write_text("def long_one():\n" + body + "\n" + "\n" * MAX_MODULE_LINES, encoding="utf-8")
    (pkg / "small.py").write_text("def short():\n    return 1\n", encoding="utf-8")
    modules, functions = oversized(pkg)
    assert modules == [f"pkg/big.py: {MAX_MODULE_LINES + MAX_FUNCTION_LINES + 1} lines"]
    assert functions == [f"pkg/big.py:1 long_one: {MAX_FUNCTION_LINES + 1} lines"]


MAX_MODULE_DOCSTRING_LINES = 12


def long_module_docstrings(root: Path = PACKAGE) -> list[str]:
    """'path: N lines' for each module whose docstring runs past MAX_MODULE_DOCSTRING_LINES: what
    the module is and why fits in a dozen lines; figures go to docs/, history to the commit log."""
    out = []
    for path in sorted(root.rglob("*.py")):
        doc = ast.parse(path.read_text(encoding="utf-8")).body[:1]
        if doc and isinstance(doc[0], ast.Expr) and isinstance(doc[0].value, ast.Constant) \
                and isinstance(doc[0].value.value, str):
            n = doc[0].end_lineno - doc[0].lineno + 1
            if n > MAX_MODULE_DOCSTRING_LINES:
                out.append(f"{path.relative_to(root.parent)}: {n} lines")
    return out


def test_no_module_docstring_is_over_12_lines():
    long = long_module_docstrings()
    assert not long, "module docstrings over 12 lines: " + "; ".join(long)


def test_the_walk_finds_a_long_module_docstring(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text('"""' + "line\n" * 13 + '"""\n')
    (tmp_path / "pkg" / "ok.py").write_text('"""' + "line\n" * 11 + '"""\n')
    assert long_module_docstrings(tmp_path / "pkg") == ["pkg/m.py: 14 lines"]
