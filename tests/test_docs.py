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


def test_a_flags_default_on_the_options_page_is_the_one_its_help_shows():
    """An --x/--no-x flag left unset by train (resolved later) was shown as `--no-x` under help's [on]."""
    import re
    text = (REPO / "docs" / "options.md").read_text(encoding="utf-8")
    found = re.findall(r"`--([\w-]+) / --no-\1` \(flag; default (-|`--(?:no-)?[\w-]+`)\).*\[(on|off)\]$", text, re.M)
    assert found
    for name, default, shown in found:
        assert default in ("-", f"`--{name}`" if shown == "on" else f"`--no-{name}`"), (name, default, shown)


PAGES = ["README.md", "docs/commands.md", "docs/serve.md", "docs/gpu.md", "docs/python-api.md",
         "docs/files-and-errors.md", "docs/performance.md"]


def _shell_commands(text: str) -> list[list[str]]:
    """The `nmtkit ...` command lines of a page's ```sh blocks, as argv lists without redirections."""
    import re
    import shlex

    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if "-m" in words and words[:1] == ["torchrun"]:
                words = words[words.index("-m"):]
                words[0] = "nmtkit" if words[1:2] == ["nmtkit"] else words[0]
                words = ["nmtkit", *words[2:]] if words[0] == "nmtkit" else words
            if words[:1] != ["nmtkit"]:
                continue
            argv, skip = [], False
            for word in words[1:]:
                if skip:
                    skip = False
                elif word in ("<", ">", "2>"):
                    skip = True
                elif word in ("&", "|"):
                    break
                else:
                    argv.append(word)
            commands.append(argv)
    return commands


def test_every_nmtkit_command_the_docs_show_parses():
    """Each `nmtkit ...` line of the README and the manual names a command and options that exist,
    with values they accept (parsed by click, not run)."""
    from nmtkit.cli import cli

    seen = 0
    for page in PAGES:
        for argv in _shell_commands((REPO / page).read_text(encoding="utf-8")):
            cmd = cli.get_command(None, argv[0])
            assert cmd is not None, f"{page}: no command {argv[0]!r}"
            cmd.make_context(argv[0], argv[1:])  # raises on an unknown option or a bad value
            seen += 1
    assert seen >= 10


def test_every_test_the_docs_name_exists():
    """docs/files-and-errors.md and docs/serve.md name the test holding each guarantee; a renamed
    or removed test (or table row) must be renamed there too."""
    import re

    for page in ("docs/files-and-errors.md", "docs/serve.md"):
        for line in (REPO / page).read_text(encoding="utf-8").splitlines():
            refs = re.findall(r"`(tests/[\w/]+\.py)::(\w+)", line)
            if not refs:
                continue
            sources = {f: (REPO / f).read_text(encoding="utf-8") for f, _ in refs}
            for f, name in refs:
                assert re.search(rf"^(async )?def {name}\(", sources[f], flags=re.M), f"{page}: no {f}::{name}"
            rows = re.findall(r"\[([\w-]+)\]`", line)
            for group in re.findall(r"\(and (`[\w-]+`(?:, `[\w-]+`)*)\)", line):
                rows += re.findall(r"`([\w-]+)`", group)
            for row in rows:
                assert any(f'"{row}"' in src for src in sources.values()), f"{page}: no table row {row}"


def test_the_training_examples_imports_resolve():
    """tests/test_train.py runs docs/python-api.md's training example, but only among the slow
    tests: its imports at least must follow the modules wherever they move."""
    import re
    import subprocess
    import sys

    text = (REPO / "docs" / "python-api.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "nmtkit.train(" in b]
    imports = [line for b in blocks for line in b.splitlines() if line.startswith(("from ", "import "))]
    assert imports
    check = "\n".join([*imports, "assert callable(nmtkit.train) and nmtkit.presets()"])
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
