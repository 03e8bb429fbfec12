"""Write dist/wheelhouse/: nmtkit and every runtime dependency except torch, as wheels.

For compute nodes without internet that already have PyTorch (`make wheelhouse`, then copy
the folder and run `pip install --no-index --find-links dist/wheelhouse nmtkit`). The list of
dependencies is read from the nmtkit wheel's own metadata (setup.py install_requires), so a
dependency added there is picked up; torch is left out (clusters install their own CUDA build).
It also holds pytest (and setuptools), so `make test-gpu SYSTEM_TORCH=1` and `make gpu-report`
run on such a node (tools/system_deps.py installs from it). Wheels are for this machine's Python
version and platform unless --python-version names the nodes' (e.g. 3.12: binary wheels for
that version are downloaded instead of built). Needs the package index (run on a machine with
network access).

  python tools/wheelhouse.py [--out dist/wheelhouse] [--python-version 3.12]
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXCLUDED = {"torch"}
# for running the test suite and the GPU report on the node, beside the runtime dependencies
TOOLS = ["pytest>=7", "setuptools"]


def runtime_requirements(wheel: Path) -> list[str]:
    """Requires-Dist of a wheel, without extras-only requirements and without torch."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode("utf-8")
    reqs = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.split(":", 1)[1].strip()
        if "extra ==" in req:
            continue
        name = re.match(r"[A-Za-z0-9_.\-]+", req).group(0)
        if name.lower().replace("_", "-") not in EXCLUDED:
            reqs.append(req)
    return reqs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "dist" / "wheelhouse"))
    ap.add_argument("--python-version", default=None,
                    help="the nodes' Python (e.g. 3.12) when it differs from this one: binary wheels only")
    ap.add_argument("--platform", default="manylinux2014_x86_64",
                    help="the nodes' platform tag, with --python-version (default manylinux2014_x86_64)")
    args = ap.parse_args()
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(out)]
    subprocess.run([*pip, "--no-deps", str(REPO)], check=True)
    wheel = next(out.glob("nmtkit-*.whl"))
    reqs = runtime_requirements(wheel) + TOOLS
    print(f"runtime dependencies (torch excluded) and tools: {', '.join(reqs)}", file=sys.stderr)
    if args.python_version:  # another interpreter: download its wheels, build nothing
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(out), "--only-binary=:all:",
                        "--python-version", args.python_version, "--platform", args.platform,
                        "--platform", "any", *reqs], check=True)
    else:
        subprocess.run([*pip, *reqs], check=True)  # with their own dependencies
    leaked = sorted(p.name for p in out.glob("*.whl") if p.name.lower().startswith(tuple(EXCLUDED)))
    if leaked:
        sys.exit(f"wheelhouse: {leaked} pulled in by a dependency; remove it or exclude that dependency")
    print(f"{len(list(out.glob('*.whl')))} wheels in {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
