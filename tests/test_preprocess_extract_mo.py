"""examples/demo/extract_mo.py: sentence pairs from gettext catalogs, cleaned, deduplicated, split."""
from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "examples" / "demo" / "extract_mo.py"
HEADER = "Content-Type: text/plain; charset=UTF-8\nPlural-Forms: nplurals=2; plural=(n > 1);\n"


def write_mo(path: Path, entries: dict[str, str]) -> None:
    """A GNU .mo file (the format msgfmt writes) holding `entries` plus the UTF-8 header."""
    entries = {"": HEADER, **entries}
    keys = sorted(entries)
    ids = [k.encode("utf-8") for k in keys]
    strs = [entries[k].encode("utf-8") for k in keys]
    n = len(keys)
    start = 7 * 4 + 16 * n
    offsets_ids, offsets_strs, blob = [], [], b""
    for b in ids:
        offsets_ids.append((len(b), start + len(blob)))
        blob += b + b"\0"
    for b in strs:
        offsets_strs.append((len(b), start + len(blob)))
        blob += b + b"\0"
    out = struct.pack("<7I", 0x950412DE, 0, n, 28, 28 + 8 * n, 0, 0)
    out += b"".join(struct.pack("<2I", *o) for o in offsets_ids)
    out += b"".join(struct.pack("<2I", *o) for o in offsets_strs)
    path.write_bytes(out + blob)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_extracts_clean_singular_translated_pairs_once(tmp_path):
    cat = tmp_path / "cat"
    cat.mkdir()
    write_mo(cat / "a.mo", {
        "Hello": "Bonjour",
        "Same": "Same",                               # untranslated: skipped
        "Empty": "",                                  # no translation: skipped
        "Two\nlines": "Deux\nlignes",                 # newlines become spaces
        "Tab\there": "Tab\tici",                      # tabs: dropped
        "Bell\x07": "Cloche\x07",                     # control characters: dropped
        "%d file\x00%d files": "%d fichier\x00%d fichiers",  # plural: singular only
        "menu\x04Open": "Ouvrir",                     # context stripped
        "  spaced   out ": "  très   espacé ",
    })
    write_mo(cat / "b.mo", {"Hello": "Bonjour", "Quit": "Quitter"})  # a duplicate across catalogs
    out = tmp_path / "corpus"
    proc = run("--out", str(out), "--catalogs", str(cat / "*.mo"), "--valid", "1", "--test", "1", "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    pairs = set()
    for split in ("train", "valid", "test"):
        en = (out / f"{split}.en").read_text(encoding="utf-8").splitlines()
        fr = (out / f"{split}.fr").read_text(encoding="utf-8").splitlines()
        assert len(en) == len(fr)
        pairs |= set(zip(en, fr))
    assert pairs == {("Hello", "Bonjour"), ("Two lines", "Deux lignes"), ("%d file", "%d fichier"),
                     ("Open", "Ouvrir"), ("spaced out", "très espacé"), ("Quit", "Quitter")}
    assert sum(1 for _ in open(out / "train.en")) == 4
    assert "6 distinct pairs from 2 catalogs" in proc.stderr
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_same_seed_same_split_other_seed_other_order(tmp_path):
    cat = tmp_path / "cat"
    cat.mkdir()
    write_mo(cat / "a.mo", {f"word {k}": f"mot {k}" for k in range(50)})
    runs = []
    for name, seed in (("x", "1"), ("y", "1"), ("z", "2")):
        assert run("--out", str(tmp_path / name), "--catalogs", str(cat / "*.mo"), "--valid", "5", "--test", "5",
                   "--seed", seed).returncode == 0
        runs.append((tmp_path / name / "train.en").read_text())
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_no_catalogs_says_what_to_install_or_to_use_data(tmp_path):
    proc = run("--out", str(tmp_path / "c"), "--catalogs", str(tmp_path / "none" / "*.mo"))
    assert proc.returncode != 0
    assert "no message catalogs" in proc.stderr and "DATA=" in proc.stderr and "apt-get install" in proc.stderr
    assert not (tmp_path / "c").exists()
