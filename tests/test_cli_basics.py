"""The `nmtkit` command itself: help, version, stubs, and no torch at start-up."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import run_cli, tiny_train_args

SUBCOMMANDS = ["preprocess", "select-data", "train", "translate", "score", "serve", "average"]


def test_help_lists_the_subcommands_in_pipeline_order():
    out = run_cli(["--help"]).out
    out = out[out.index("Commands:"):]
    positions = [out.index(name) for name in SUBCOMMANDS]
    assert positions == sorted(positions)


def test_every_subcommand_has_help():
    for name in SUBCOMMANDS:
        code, out, err = run_cli([name, "--help"])
        assert code == 0, (name, err)
        assert "Usage:" in out


def test_version():
    code, out, _ = run_cli(["--version"])
    assert code == 0 and "nmtkit" in out


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
    code, _, err = run_cli(["score", "--no-such-option"], process=True)
    assert code != 0
    assert "Traceback" not in err
    assert "no-such-option" in err


@pytest.mark.parametrize("argv, needle, command", [
    (["translate", "-m", "x.pt", "--beam", "abc"], "'abc' is not a valid integer", "nmtkit translate"),
    (["translate", "--no-such-option"], "No such option '--no-such-option'", "nmtkit translate"),
    (["translate"], "Missing option '--model'", "nmtkit translate"),
    # a required option of one value: "--lang must be a string, got None" under click >= 8.3
    (["tokenize"], "Missing option '--lang'", "nmtkit tokenize"),
    (["preprocess", "--src-lang", "en", "--tgt-lang", "fr", "--train", "t", "--valid", "v"], "Missing option '--dest'",
     "nmtkit preprocess"),
    (["select-data", "--tgt-lang", "fr", "--in-domain", "i", "--pool", "p", "--lines", "3", "--output-prefix", "o"],
     "Missing option '--src-lang'", "nmtkit select-data"),
    (["score", "--hyp", "h", "-r", "r", "--metrics", "meteor"], "meteor", "nmtkit score"),
    (["no-such-command"], "No such command 'no-such-command'", "nmtkit"),
    # OpenNMT-py's single-dash words: "-o utput" (translations written to a file named utput), "No such option '-b'"
    (["translate", "-m", "x.pt", "-i", "in", "-output"], "'-output' (nmtkit's long options begin with two dashes)",
     "nmtkit translate"),
    (["translate", "-m", "x.pt", "-beam_size", "5"], "'-beam_size' (nmtkit's long options begin with two dashes). "
     "(Did you mean one of: '--batch-size', '--beam', '--buffer-size'?)", "nmtkit translate"),
])
def test_a_bad_command_line_is_one_error_line_pointing_at_help(argv, needle, command):
    """click's own form is four lines (usage, hint, blank, error): one line, as every other error."""
    code, out, err = run_cli(argv)
    assert code == 2 and out == ""
    [line] = err.strip().splitlines()
    assert line.startswith("nmtkit: error: ") and needle in line, line
    assert line.endswith(f"(see '{command} --help')"), line


@pytest.mark.parametrize("quiet", [False, True])
def test_library_log_records_and_python_warnings_share_one_stderr_line_format(capsys, quiet):
    """Both channels a library can warn through end in the CLI's one handler, muted by -q."""
    import logging
    import warnings

    from nmtkit.cli.common import quiet_warnings, setup_warnings

    setup_warnings()
    setup_warnings()  # idempotent: one handler, one line per warning
    quiet_warnings(quiet)
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        logging.captureWarnings(False)  # pytest replaced showwarning after setup_warnings captured it:
        logging.captureWarnings(True)  # capture again, as the CLI does in a fresh process
        logging.getLogger("nmtkit.some.module").warning("dev set %s is tiny", "valid")
        logging.getLogger("nmtkit.some.module").info("not for stderr")
        warnings.warn("a library's UserWarning", UserWarning, stacklevel=1)
    err = capsys.readouterr().err
    setup_warnings()  # leave the handler unmuted for the next test
    if quiet:
        assert err == ""
    else:
        lines = err.splitlines()
        assert lines[0] == "nmtkit: warning: dev set valid is tiny"
        assert lines[1].startswith("nmtkit: warning: ") and "UserWarning: a library's UserWarning" in lines[1]
        assert "not for stderr" not in err


@pytest.mark.parametrize("quiet", [False, True])
def test_matplotlibs_warnings_share_the_line_format_and_quiet_silences_them(tmp_path, monkeypatch, quiet):
    """With an MPLCONFIGDIR (or HOME) that cannot be written, matplotlib's two warnings reached
    stderr through logging's last resort: unprefixed, and even under -q."""
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "in.txt" / "mpl"))  # under a file: even root fails
    (tmp_path / "in.txt").write_text("le chat\n", encoding="utf-8")
    txt = str(tmp_path / "in.txt")
    code, _, err = run_cli(["score", "--hyp", txt, "-r", txt, "--src", txt, "--plot", str(tmp_path / "p.png"),
                            *(["-q"] if quiet else [])], process=True)
    assert code == 0 and (tmp_path / "p.png").is_file()
    lines = err.splitlines()
    assert lines == [] if quiet else any("MPLCONFIGDIR" in x for x in lines) and all(
        x.startswith("nmtkit: ") for x in lines), err


def test_a_matplotlib_backend_it_does_not_know_in_mplbackend_draws_to_files_all_the_same(tmp_path, monkeypatch):
    """MPLBACKEND=module://matplotlib_inline.backend_inline (a notebook's, exported to a shell):
    `import matplotlib` itself failed, so score --plot and translate --plot-attention ended in a
    traceback and train warned at each validation that it could not draw curves.png."""
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    (tmp_path / "in.txt").write_text("le chat\n", encoding="utf-8")
    txt = str(tmp_path / "in.txt")
    code, _, err = run_cli(["score", "--hyp", txt, "-r", txt, "--src", txt, "--plot", str(tmp_path / "p.png"), "-q"],
                           process=True)
    assert (code, err) == (0, "") and (tmp_path / "p.png").is_file()


def test_a_torch_compile_cache_folder_that_cannot_be_made_is_named_as_torchs(data_dir, tmp_path, monkeypatch):
    """TORCHINDUCTOR_CACHE_DIR naming a folder that cannot be made (another node's scratch): train,
    whose fused Adam imports torch's compiler, which makes that folder, failed with
    "nmtkit: error: /scratch/x: No such file or directory", a path on no command line."""
    (tmp_path / "f.txt").write_text("x\n")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "f.txt" / "cache"))  # under a file: even root fails
    code, _, err = run_cli(["train", *tiny_train_args(), "--data", str(data_dir), "--save-dir", str(tmp_path / "run"),
                            "--max-updates", "1", "-q"], process=True)
    assert code == 1 and err.splitlines() == [f"nmtkit: error: {tmp_path / 'f.txt' / 'cache'}: Not a directory "
                                              "(TORCHINDUCTOR_CACHE_DIR: set it to a folder you can write)"], err


_END = """
import atexit, sys, threading, time
import torch  # noqa: F401  (the teardown worth skipping is torch's)
from nmtkit.cli import _end_process

class Torn:
    def __del__(self, _open=open, _path=sys.argv[1] + ".teardown"):  # builtins go first
        _open(_path, "w").close()

torn = Torn()  # freed when the interpreter tears its modules down
atexit.register(lambda: open(sys.argv[1] + ".atexit", "w").close())
sys.stdout.write("x" * 1_000_000)  # still in the buffer
sys.stderr.write("done")
if sys.argv[2] == "thread":
    threading.Thread(target=time.sleep, args=(0.3,)).start()
if sys.argv[2] == "profiled":
    sys.setprofile(lambda *_: None)
_end_process(3)
"""


@pytest.mark.parametrize("case", ["alone", "thread", "profiled"])
def test_the_program_skips_the_interpreters_teardown_only_with_nothing_left_to_run(tmp_path, case):
    """After a command, the program flushes stdout and stderr, runs the atexit handlers and
    exits with the command's status without the (slow) teardown; a live non-daemon thread
    (which the ordinary exit waits for) or a profiler (which writes its results at the
    ordinary exit) gets the ordinary exit."""
    marker = str(tmp_path / "m")
    proc = subprocess.run([sys.executable, "-c", _END, marker, case], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3
    assert proc.stdout == "x" * 1_000_000 and proc.stderr == "done"
    assert (tmp_path / "m.atexit").exists()
    assert (tmp_path / "m.teardown").exists() == (case != "alone")


_CTRL_C_AT_EXIT = """
import atexit, os, signal, sys, time
import torch  # noqa: F401  (the fast exit runs with torch imported)
from nmtkit.cli import _end_process

signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal starts the program
atexit.register(lambda: open(sys.argv[1], "w").close())  # registered first: it runs last
atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(0.2)))
sys.stderr.write("nmtkit: aborted")
_end_process(130)
"""


def test_a_second_ctrl_c_while_the_program_exits_is_no_traceback(tmp_path):
    """Ctrl-C twice: the second came while the atexit handlers ran (torch's), where a
    KeyboardInterrupt is reported as 'Exception ignored in atexit callback' and a traceback."""
    marker = tmp_path / "ran"
    proc = subprocess.run([sys.executable, "-c", _CTRL_C_AT_EXIT, str(marker)], capture_output=True, text=True,
                          timeout=120)
    assert proc.stderr == "nmtkit: aborted" and proc.returncode == 130, proc.stderr
    assert marker.exists()


@pytest.mark.parametrize("closed", ["<stdin>", "<stdout>"])
def test_a_standard_stream_the_command_was_started_without_is_one_line_naming_it(tmp_path, closed):
    """`cmd <&-` and `cmd >&-` leave Python's sys.stdin/stdout None: using it is an error
    naming the stream, not an AttributeError traceback."""
    (tmp_path / "in.txt").write_text("Hello, world!\n")
    redirect = "<&-" if closed == "<stdin>" else f"< {tmp_path / 'in.txt'} >&-"
    proc = subprocess.run(f"{sys.executable} -m nmtkit tokenize --lang en {redirect}", shell=True,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == [f"nmtkit: error: {closed}: closed: the command was started without it"]


def test_tokenize_reads_and_writes_dash_as_the_standard_streams(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run_cli(["tokenize", "--lang", "en", "-i", "-", "-o", "-"], "Hello, world!\n")
    assert result.code == 0, result.err
    assert result.out == "Hello , world !\n"
    assert list(tmp_path.iterdir()) == []


def test_a_closed_stdout_is_no_error_for_a_command_that_writes_a_file(tmp_path):
    (tmp_path / "in.txt").write_text("Hello, world!\n")
    proc = subprocess.run(f"{sys.executable} -m nmtkit tokenize --lang en -i {tmp_path / 'in.txt'} "
                          f"-o {tmp_path / 'out.txt'} >&-", shell=True, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out.txt").read_text() == "Hello , world !\n"


def test_a_closed_stdout_whose_encoding_a_library_reads_is_no_error_for_train(data_dir, tmp_path):
    """`train ... >&-` failed with "<stdout>: closed": sympy, which torch imports, reads
    sys.stdout.encoding on import, as it may of Python's None for a closed stream."""
    run = tmp_path / "run"
    args = " ".join([*tiny_train_args(), "--data", str(data_dir), "--save-dir", str(run), "--max-updates", "1"])
    proc = subprocess.run(f"{sys.executable} -m nmtkit train {args} -q >&-", shell=True, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert (proc.returncode, proc.stderr) == (0, "")
    assert (run / "checkpoint_last.pt").is_file()


@pytest.mark.parametrize("error", [
    RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you tried to "
                 "allocate 15479999998452 bytes.\nmore"),
    MemoryError(),
])
def test_running_out_of_memory_is_one_error_line(monkeypatch, error):
    """train --emb-dim 9999999999 was a traceback from torch's allocator."""
    import nmtkit.cli.tokenize as tokenize_cli

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(tokenize_cli, "run", fail)
    code, _, err = run_cli(["tokenize", "--lang", "en"], "x\n")
    assert code == 1, err
    [line] = err.strip().splitlines()
    assert line.startswith("nmtkit: error: out of memory: ") and "Traceback" not in err, err


def test_out_of_memory_advises_only_options_the_command_has(monkeypatch):
    import nmtkit.score
    import nmtkit.translate

    def fail(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(nmtkit.score, "run", fail)
    monkeypatch.setattr(nmtkit.translate, "run", fail)
    code, _, err = run_cli(["score", "--hyp", "-", "--ref", "-"], "x\n")
    assert code == 1 and err.startswith("nmtkit: error: out of memory: MemoryError") and "--" not in err, err
    code, _, err = run_cli(["translate", "-m", "x.pt"], "x\n")
    assert code == 1 and "out of memory" in err and "--max-tokens" in err, err


def test_another_runtime_error_is_not_taken_for_running_out_of_memory(monkeypatch):
    import nmtkit.cli.tokenize as tokenize_cli

    def fail(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(tokenize_cli, "run", fail)
    code, _, err = run_cli(["tokenize", "--lang", "en"], "x\n")
    assert code == 1 and "out of memory" not in err and "RuntimeError: a bug" in err



# Sends this process a SIGINT when `import click` starts (nmtkit.cli loading), then starts the
# program as `python -m nmtkit` does (argv[1] "-m") or as the `nmtkit` script pip writes for the
# entry point "MODULE:FUNCTION" in argv[1] does.
_CTRL_C_WHILE_LOADING = """
import importlib, importlib.abc, os, runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal starts the program
class Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "click":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Hook())
how, sys.argv = sys.argv[1], ["nmtkit", "--help"]
if how == "-m":
    runpy.run_module("nmtkit", run_name="__main__")
else:
    module, function = how.split(":")
    sys.exit(getattr(importlib.import_module(module), function)())
"""


@pytest.mark.parametrize("how", ["python -m", "script"])
def test_ctrl_c_while_the_command_loads_is_no_traceback(how):
    """Ctrl-C in the program's first tenth of a second, while nmtkit.cli imported, was a
    KeyboardInterrupt traceback; now it ends the program as a later one does."""
    import re

    from tests.conftest import REPO

    entry = re.search(r'"nmtkit=([\w.]+:\w+)"', (REPO / "setup.py").read_text()).group(1)
    proc = subprocess.run([sys.executable, "-c", _CTRL_C_WHILE_LOADING, "-m" if how == "python -m" else entry],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.stderr == "nmtkit: aborted\n" and proc.returncode == 130, proc.stderr
