"""`python -m nmtkit.text.tokenize`: the recipes' one-off tokeniser agrees with preprocess's
tokenize and rejects bad input with one line naming file and line, writing nothing."""
from __future__ import annotations

import subprocess
import sys

from nmtkit.text.moses import tokenize

LINES = ['Hello, "world" -- it\'s 3.5 km!', "", "Une phrase à l'essai."]


def _run(args, stdin: bytes | None = None):
    return subprocess.run([sys.executable, "-m", "nmtkit.text.tokenize", *args], input=stdin,
                          capture_output=True)


def test_file_to_file_equals_moses_tokenize_line_for_line(tmp_path):
    src, out = tmp_path / "in.fr", tmp_path / "out.fr"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    proc = _run(["--lang", "fr", "-i", str(src), "-o", str(out), "--workers", "2"])
    assert proc.returncode == 0, proc.stderr
    assert out.read_text(encoding="utf-8").split("\n")[:-1] == [" ".join(tokenize(x, "fr")) for x in LINES]


def test_invalid_utf8_in_a_file_names_file_and_line_and_writes_nothing(tmp_path):
    src, out = tmp_path / "in.en", tmp_path / "out.en"
    src.write_bytes(b"fine\nbad \xff byte\n")
    proc = _run(["--lang", "en", "-i", str(src), "-o", str(out)])
    err = proc.stderr.decode()
    assert proc.returncode == 1 and f"{src}:2:" in err and "invalid UTF-8" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == [src]


def test_invalid_utf8_on_stdin_names_the_line():
    proc = _run(["--lang", "en"], stdin=b"fine\nbad \xff\n")
    assert proc.returncode == 1 and "<stdin>:2: invalid UTF-8" in proc.stderr.decode()


def test_missing_input_file_is_one_clear_line(tmp_path):
    proc = _run(["--lang", "en", "-i", str(tmp_path / "nope.en")])
    err = proc.stderr.decode()
    assert proc.returncode == 1 and "nope.en" in err and "not found" in err and "Traceback" not in err
