"""Verify a downloaded archive against known SHA-256 sums, or record it on first use.

usage: python verify_checksum.py FILE KNOWN_SUMS LOCAL_SUMS
Exit 1 (and remove nothing) when a sum is known and differs: the download is corrupt.
"""
import hashlib
import os
import sys


def read_sums(path):
    sums = {}
    if os.path.exists(path):
        for line in open(path, encoding="utf-8"):
            if line.strip() and not line.startswith("#"):
                digest, name = line.split(None, 1)
                sums[name.strip()] = digest
    return sums


def main(path, known_path, local_path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    digest, name = h.hexdigest(), os.path.basename(path)
    for sums_path in (known_path, local_path):
        expected = read_sums(sums_path).get(name)
        if expected is not None:
            if expected != digest:
                print(f"{path}: SHA-256 {digest} does not match {expected} in {sums_path}; "
                      "delete the file and download again", file=sys.stderr)
                return 1
            print(f"{path}: checksum OK ({sums_path})", file=sys.stderr)
            return 0
    with open(local_path, "a", encoding="utf-8") as f:
        f.write(f"{digest}  {name}\n")
    print(f"{path}: no known checksum; recorded {digest} in {local_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
