"""A real `nmtkit serve` subprocess on 127.0.0.1 and a free port (the serve tests and the load benchmark)."""
from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nmtkit

# the directory that holds the nmtkit package: the child imports the same nmtkit as its parent
PACKAGE_ROOT = Path(nmtkit.__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`python -m nmtkit serve ARGS --port FREE`, started and waited for until it announces itself."""

    def __init__(self, *args: str, timeout: float = 120, threads: int = 1):
        self.port = free_port()
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=str(PACKAGE_ROOT))
        self.proc = subprocess.Popen([sys.executable, "-m", "nmtkit", "serve", *args, "--port", str(self.port)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.stderr: list[str] = []
        self.banner = self._wait_for("serving ", timeout)
        self.url = f"http://127.0.0.1:{self.port}"

    def _wait_for(self, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stderr], [], [], 0.2)
            if ready:
                line = self.proc.stderr.readline().decode()
                if not line and self.proc.poll() is not None:
                    break
                self.stderr.append(line)
                if text in line:
                    return line
            elif self.proc.poll() is not None:
                break
        self.proc.kill()
        raise RuntimeError(f"server did not say {text!r}: {''.join(self.stderr)}{self.proc.stderr.read().decode()}")

    def post(self, path: str, payload, timeout: float = 60):
        req = urllib.request.Request(self.url + path, data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())

    def get(self, path: str, timeout: float = 60):
        """GET `path` -> the decoded JSON answer."""
        with urllib.request.urlopen(self.url + path, timeout=timeout) as resp:
            return json.loads(resp.read())

    def stop(self, send: bool = True, timeout: float = 60) -> tuple[int, str]:
        """Send SIGTERM (unless `send` is false: a signal was sent already) and wait for the exit:
        (exit status, all of stderr)."""
        import signal

        if send and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return self.proc.returncode, "".join(self.stderr) + err.decode()

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
