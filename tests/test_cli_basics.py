"""The `nmtkit` command itself: help, version, stubs, and no torch at start-up."""
from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from nmtkit.cli import cli

SUBCOMMANDS = ["preprocess", "select-data", "train", "translate", "score", "serve", "average"]


def test_help_lists_the_subcommands_in_pipeline_order():
    out = CliRunner().invoke(cli, ["--help"]).output
    out = out[out.index("Commands:"):]
    positions = [out.index(name) for name in SUBCOMMANDS]
    assert positions == sorted(positions)


def test_every_subcommand_has_help():
    for name in SUBCOMMANDS:
        res = CliRunner().invoke(cli, [name, "--help"])
        assert res.exit_code == 0, (name, res.output)
        assert "Usage:" in res.output


def test_version():
    res = CliRunner().invoke(cli, ["--version"])
    assert res.exit_code == 0 and "nmtkit" in res.output


def test_help_does_not_import_torch():
    code = (
        "import sys\n"
        "from nmtkit.cli import cli\n"
        "try:\n    cli.main(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
        f"for name in {SUBCOMMANDS!r}:\n"
        "    try:\n        cli.main([name, '--help'], standalone_mode=False)\n    except SystemExit:\n        pass\n"
        "assert 'torch' not in sys.modules, 'torch imported by --help'\n"
        "assert 'aiohttp' not in sys.modules, 'aiohttp imported by --help'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_unknown_option_is_a_clean_error():
    proc = subprocess.run(
        [sys.executable, "-m", "nmtkit", "score", "--no-such-option"], capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "no-such-option" in proc.stderr
