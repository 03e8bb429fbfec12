"""The measuring instruments in devtools/ (at the repo root) stay out of the toolkit's own import path."""
from __future__ import annotations

import ast
from pathlib import Path

import nmtkit

PACKAGE = Path(nmtkit.__file__).resolve().parent


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_runtime_module_imports_the_devtools():
    runtime = list(PACKAGE.rglob("*.py"))
    assert len(runtime) > 50
    assert not list((PACKAGE / "devtools").glob("*.py"))  # not installed with the package
    offenders = [str(p.relative_to(PACKAGE)) for p in runtime
                 if any(m.split(".")[0] == "devtools" or m.startswith("nmtkit.devtools")
                        for m in _imported_modules(p))]
    assert offenders == []


def test_tests_and_benchmarks_do_not_import_each_other():
    """What both need lives in devtools/; a test runs a benchmark as a command, never imports it."""
    repo = PACKAGE.parent
    pairs = [(repo / "tests", "benchmarks"), (repo / "benchmarks", "tests")]
    offenders = []
    for folder, other in pairs:
        files = sorted(folder.rglob("*.py"))
        assert files, folder
        offenders += [f"{p.relative_to(repo)} imports {m}" for p in files for m in sorted(_imported_modules(p))
                      if m == other or m.startswith(other + ".")]
    assert offenders == []
