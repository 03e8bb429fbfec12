#!/usr/bin/env python3
"""Extract English-French sentence pairs from the installed gettext catalogs.

Programs ship human translations of their messages as compiled catalogs
(`/usr/share/locale/fr/LC_MESSAGES/*.mo`); every entry is an English msgid with its French
msgstr. This script reads them with Python's `gettext`, keeps one clean sentence pair per
line, removes duplicates, shuffles with a fixed seed and writes

    OUT/train.en OUT/train.fr  OUT/valid.en OUT/valid.fr  OUT/test.en OUT/test.fr

(valid and test 1000 pairs each by default). The files are written under a temp directory
and renamed into place at the end, so OUT never looks complete when it is not. Rules:
- the header entry (empty msgid) is skipped; plural entries (keys `(msgid, n)`) give their
  singular form (n = 0) only;
- a message context (msgctxt, stored as "context\x04msgid") is removed from the msgid;
- entries with an empty msgstr, or a msgstr equal to the msgid (untranslated), are skipped;
- internal newlines become spaces and runs of whitespace collapse to one space;
- pairs containing a tab or another control character are dropped.
No nmtkit or torch import: plain standard library.
"""
from __future__ import annotations

import argparse
import gettext
import glob
import os
import random
import re
import shutil
import sys
import tempfile

DEFAULT_GLOB = "/usr/share/locale/fr/LC_MESSAGES/*.mo"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
_SPACE = re.compile(r"\s+")


def clean(text: str) -> str | None:
    """One-line version of a message, or None when it cannot be one clean sentence line."""
    if "\t" in text:
        return None
    text = text.replace("\r\n", "\n").replace("\n", " ")
    if _CONTROL.search(text):
        return None
    text = _SPACE.sub(" ", text).strip()
    return text or None


def catalog_pairs(path: str) -> list[tuple[str, str]]:
    """(English, French) pairs of one .mo catalog, cleaned (unreadable catalogs give [])."""
    try:
        with open(path, "rb") as f:
            catalog = gettext.GNUTranslations(f)._catalog  # msgid -> msgstr
    except Exception as err:  # noqa: BLE001 - a malformed catalog must not stop the demo
        print(f"extract_mo: skipping {path}: {err}", file=sys.stderr)
        return []
    out = []
    for key, msgstr in catalog.items():
        if isinstance(key, tuple):  # plural entry: (msgid, index); keep the singular form
            msgid, index = key
            if index != 0:
                continue
        else:
            msgid = key
        if "\x04" in msgid:  # "context\x04msgid": the context (msgctxt) is not part of the text
            msgid = msgid.split("\x04", 1)[1]
        if not msgid or not isinstance(msgstr, str) or not msgstr or msgstr == msgid:
            continue
        en, fr = clean(msgid), clean(msgstr)
        if en is None or fr is None or en == fr:
            continue
        out.append((en, fr))
    return out


def write_splits(pairs: list[tuple[str, str]], out_dir: str, n_valid: int, n_test: int) -> dict[str, int]:
    """Write test, valid, train (in that order from the shuffled pairs) atomically into out_dir."""
    parent = os.path.dirname(os.path.abspath(out_dir)) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=os.path.basename(os.path.abspath(out_dir)) + ".tmp-", dir=parent)
    try:
        parts = {"test": pairs[:n_test], "valid": pairs[n_test:n_test + n_valid], "train": pairs[n_test + n_valid:]}
        for name, part in parts.items():
            for k, lang in enumerate(("en", "fr")):
                with open(os.path.join(tmp, f"{name}.{lang}"), "w", encoding="utf-8") as f:
                    for pair in part:
                        f.write(pair[k] + "\n")
        if os.path.isdir(out_dir):
            shutil.rmtree(out_dir)
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {name: len(part) for name, part in parts.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory (replaced if it exists)")
    ap.add_argument("--catalogs", default=DEFAULT_GLOB, help=f"glob of .mo files (default: {DEFAULT_GLOB})")
    ap.add_argument("--valid", type=int, default=1000, help="validation pairs (default: 1000)")
    ap.add_argument("--test", type=int, default=1000, help="test pairs (default: 1000)")
    ap.add_argument("--seed", type=int, default=1, help="shuffle seed (default: 1)")
    args = ap.parse_args(argv)

    paths = sorted(glob.glob(args.catalogs))
    if not paths:
        print(f"extract_mo: error: no message catalogs match {args.catalogs}.\n"
              "  Install programs that ship French translations, e.g. on Debian/Ubuntu "
              "`apt-get install --reinstall coreutils tar bash gettext util-linux` (Ubuntu: also language-pack-fr);\n"
              "  minimal/Docker images often drop /usr/share/locale (see /etc/dpkg/dpkg.cfg.d/ path-exclude, localepurge).\n"
              "  Or run the demo on another corpus: make demo DATA=DIR with DIR/{train,valid,test}.{en,fr}.",
              file=sys.stderr)
        return 1
    seen: set[tuple[str, str]] = set()
    pairs: list[tuple[str, str]] = []
    for path in paths:
        for pair in catalog_pairs(path):
            if pair not in seen:
                seen.add(pair)
                pairs.append(pair)
    need = args.valid + args.test + 1
    if len(pairs) < need:
        print(f"extract_mo: error: only {len(pairs)} pairs in {len(paths)} catalogs, need at least {need}; "
              "install more translated programs or use DATA=DIR", file=sys.stderr)
        return 1
    random.Random(args.seed).shuffle(pairs)
    sizes = write_splits(pairs, args.out, args.valid, args.test)
    print(f"extract_mo: {len(pairs)} distinct pairs from {len(paths)} catalogs -> {args.out} "
          f"(train {sizes['train']}, valid {sizes['valid']}, test {sizes['test']})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
