"""The generated docs/options.md matches the options' own metadata."""
from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_options_doc_is_current():
    spec = importlib.util.spec_from_file_location("options_doc", REPO / "tools" / "options_doc.py")
    options_doc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(options_doc)
    committed = (REPO / "docs" / "options.md").read_text(encoding="utf-8")
    assert committed == options_doc.render(), (
        "docs/options.md is out of date with the commands' options: regenerate it with `make docs` "
        "(or `python tools/options_doc.py`) and commit it")
