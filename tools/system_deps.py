"""Make this interpreter's own torch run nmtkit: install nmtkit's other dependencies (and pytest)
from a wheelhouse into a folder, without the package index and without touching torch.

For GPU nodes that have a CUDA build of torch, no package index and not all of nmtkit's
dependencies (`make test-gpu SYSTEM_TORCH=1`, `make gpu-report`). The wheelhouse comes from
`make wheelhouse` (tools/wheelhouse.py) on a machine with network access. Requirements this
interpreter already satisfies are left alone; the others go to `--dest` with `pip install
--no-index --target`, which the Makefile then puts on PYTHONPATH after the repository (so the
source tree is the nmtkit that runs). torch is never installed: it is not in the wheelhouse,
and the command fails if torch imports from anywhere else afterwards.

  python tools/system_deps.py --wheelhouse dist/wheelhouse --dest .system-torch-deps
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wheelhouse import TOOLS, runtime_requirements  # noqa: E402


def torch_location(env: dict[str, str] | None = None) -> str:
    """Where this interpreter imports torch from, and its version ('' when it cannot)."""
    code = "import torch; print(torch.__version__, torch.__file__)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def missing(reqs: list[str]) -> list[str]:
    """The requirements this interpreter does not already satisfy."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # a bare interpreter: pip's own copy
        from pip._vendor.packaging.requirements import Requirement

    out = []
    for text in reqs:
        req = Requirement(text)
        try:
            have = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            out.append(text)
            continue
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            out.append(text)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheelhouse", default="dist/wheelhouse")
    ap.add_argument("--dest", default=".system-torch-deps")
    args = ap.parse_args()
    wheelhouse, dest = Path(args.wheelhouse), Path(args.dest)
    if importlib.util.find_spec("pip") is None:
        sys.exit(f"system_deps: {sys.executable} has no pip (python -m ensurepip, or the distribution's "
                 "python3-pip, adds it); it installs the wheelhouse")
    before = torch_location()
    if not before:
        sys.exit(f"system_deps: {sys.executable} cannot import torch; SYSTEM_TORCH=1 uses the interpreter's own "
                 "torch (give PYTHON=an interpreter that has it)")
    wheels = sorted(wheelhouse.glob("nmtkit-*.whl"))
    if not wheels:
        sys.exit(f"system_deps: no nmtkit wheel in {wheelhouse}: run `make wheelhouse` on a machine with the "
                 "package index and copy dist/wheelhouse here")
    needed = missing(runtime_requirements(wheels[-1]) + TOOLS)
    print(f"torch {before.split()[0]} from this interpreter; installing into {dest}: "
          f"{', '.join(needed) or 'nothing (all present)'}", file=sys.stderr)
    dest.mkdir(parents=True, exist_ok=True)
    if needed:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "--no-index", "--find-links", str(wheelhouse), "--target", str(dest), "--upgrade",
                        *needed], check=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(dest), os.environ.get("PYTHONPATH")) if p))
    after = torch_location(env)
    if after != before:
        sys.exit(f"system_deps: torch changed from '{before}' to '{after}' (a wheel in {wheelhouse} pulled it in)")
    if (dest / "torch").exists():
        sys.exit(f"system_deps: {dest} holds a torch; remove it")


if __name__ == "__main__":
    main()
