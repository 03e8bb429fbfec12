"""Resident memory of a command over its run: peak RSS and a timeline keyed to its progress lines.

Runs the command, samples the process tree's VmRSS (/proc/PID/status, Linux) every --every
seconds, reads its stderr for nmtkit's "update N |" progress lines, and reports the peak
(the kernel's own maximum resident set size of the process, from wait4's ru_maxrss: the same
figure `/usr/bin/time -v` reports) and the RSS at chosen updates.

    python benchmarks/rss.py --at 100,300,600 -- nmtkit train --data D --save-dir R --preset small \
        --batch-size 64 --threads 2 --max-updates 600 --log-every 20 --force
    python benchmarks/rss.py -- sh -c 'nmtkit translate -m CKPT --beam 5 < dev.en > /dev/null'

Prints one JSON object on stdout: {"peak_mb", "wall_s", "at_update": {N: MB}, "samples": [[s, MB], ...]}.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

UPDATE_RE = re.compile(r"update ([\d,]+) \|")


def tree_pids(pid: int) -> list[int]:
    """`pid` and its descendants (the /proc children lists of their threads), those still running."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            todo += [int(c) for t in Path(f"/proc/{p}/task").iterdir() for c in (t / "children").read_text().split()]
        except (OSError, ValueError):
            continue
        out.append(p)
    return out


def rss_kb(pids: list[int]) -> int:
    """The VmRSS (kB) of these processes together; 0 for one already gone."""
    total = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return total


def tree_rss_kb(pid: int) -> int:
    """VmRSS (kB) of `pid` and its descendants, 0 for a process already gone."""
    return rss_kb(tree_pids(pid))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--every", type=float, default=0.25, help="seconds between samples [0.25]")
    ap.add_argument("--at", default="", help="comma list of updates to report RSS at")
    ap.add_argument("--log", default=None, help="copy the command's stderr here")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("no command")
    wanted = {int(x) for x in args.at.split(",") if x}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, errors="replace")
    samples: list[list[float]] = []
    at: dict[int, float] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            kb = tree_rss_kb(proc.pid)
            if kb:
                samples.append([round(time.perf_counter() - t0, 2), round(kb / 1024, 1)])
            done.wait(args.every)

    def read_stderr() -> None:
        log = open(args.log, "w") if args.log else None
        assert proc.stderr is not None
        for line in proc.stderr:
            if log:
                log.write(line)
            m = UPDATE_RE.search(line)
            if m:
                n = int(m.group(1).replace(",", ""))
                if n in wanted or not wanted:
                    at[n] = round(tree_rss_kb(proc.pid) / 1024, 1)
        if log:
            log.close()

    threads = [threading.Thread(target=sample, daemon=True), threading.Thread(target=read_stderr, daemon=True)]
    for t in threads:
        t.start()
    _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    for t in threads:
        t.join(timeout=5)
    proc.returncode = os.waitstatus_to_exitcode(status)
    out = {"rc": proc.returncode, "peak_mb": round(usage.ru_maxrss / 1024, 1),
           "wall_s": round(time.perf_counter() - t0, 2), "at_update": at, "samples": samples}
    json.dump(out, sys.stdout)
    print()
    sys.exit(1 if proc.returncode else 0)


if __name__ == "__main__":
    main()
