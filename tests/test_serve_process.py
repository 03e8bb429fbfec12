"""`nmtkit serve` as a real process: loopback by default, graceful stop, same output as `nmtkit translate`."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from devtools.server import ServerProcess, free_port
from tests.conftest import run_cli

LINES = ["the cat sat on a mat .", "", "a dog ran in the park", "the big red house", "cat"]
DECODE = ["--beam", "3", "--max-len-a", "1", "--max-len-b", "3"]


def nmtkit_translate(ckpt: str, lines: list[str]) -> list[str]:
    code, out, err = run_cli(["translate", "-m", ckpt, *DECODE, "--quiet"], "\n".join(lines) + "\n", process=True,
                             timeout=120)
    assert code == 0, err
    return out.split("\n")[:-1]


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_signal_stops_accepting_finishes_the_request_in_flight_and_exits_0(ckpt, sig):
    # the lone request waits --batch-delay-ms for company, so it is surely in flight at the signal
    with ServerProcess("-m", ckpt, *DECODE, "--batch-delay-ms", "1500") as server:
        assert "http://127.0.0.1:" in server.banner  # loopback unless asked otherwise
        answer: dict = {}
        client = threading.Thread(target=lambda: answer.update(server.post("/translate", {"text": LINES})))
        client.start()
        time.sleep(0.6)
        assert client.is_alive(), "the request was answered before the signal"
        server.proc.send_signal(sig)
        time.sleep(0.3)
        assert refused(server.port), "still accepting connections after the signal"
        client.join(60)
        status, stderr = server.stop(send=False)
    assert status == 0, stderr
    assert "stopped" in stderr and "Traceback" not in stderr
    import nmtkit

    expected = nmtkit.load(ckpt).translate(LINES, beam=3, max_len_a=1, max_len_b=3)
    assert [t["text"] for t in answer["translations"]] == expected


def test_a_sighup_ignored_as_by_nohup_leaves_the_server_serving(ckpt):
    hup = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the child inherits it, as from nohup
    try:
        server = ServerProcess("-m", ckpt, *DECODE)
    finally:
        signal.signal(signal.SIGHUP, hup)
    with server:
        server.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert server.post("/translate", {"text": ["cat"]})["translations"]
        status, stderr = server.stop()
    assert status == 0 and "stopped" in stderr, stderr


@pytest.mark.parametrize("sig, status, said", [(signal.SIGINT, 130, "aborted"), (signal.SIGTERM, 143, "terminated")],
                         ids=["SIGINT", "SIGTERM"])
def test_a_second_signal_stops_at_once_a_server_finishing_its_requests(ckpt, sig, status, said):
    """The first signal lets the requests in flight finish (up to a minute); a second was ignored."""
    # the lone request waits --batch-delay-ms for company: 10 s in flight unless the second signal ends it
    with ServerProcess("-m", ckpt, *DECODE, "--batch-delay-ms", "10000") as server:
        def post() -> None:
            with contextlib.suppress(OSError):  # the server is stopped before it answers
                server.post("/translate", {"text": LINES})

        client = threading.Thread(target=post, daemon=True)
        client.start()
        time.sleep(0.6)
        server.proc.send_signal(sig)
        time.sleep(1.0)
        assert server.proc.poll() is None, "the request in flight did not hold the stop: nothing to test"
        t0 = time.monotonic()
        server.proc.send_signal(sig)
        code, stderr = server.stop(send=False, timeout=30)
    assert time.monotonic() - t0 < 5 and code == status, stderr
    assert "Ctrl-C again stops at once" in stderr and "Traceback" not in stderr
    assert stderr.rstrip().endswith(f"nmtkit: {said}")


def test_served_translations_equal_nmtkit_translate_through_both_routes(ckpt):
    with ServerProcess("-m", ckpt, *DECODE, "--quiet") as server:
        native = server.post("/translate", {"text": LINES})
        onmt = server.post("/translator/translate", [{"src": line, "id": 1} for line in LINES])
        status, stderr = server.stop()
    expected = nmtkit_translate(ckpt, LINES)
    assert [t["text"] for t in native["translations"]] == expected
    assert [r["tgt"] for r in onmt[0]] == expected
    assert status == 0 and "POST" not in stderr  # --quiet: no request lines


def test_a_port_in_use_is_a_one_line_error(ckpt):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "nmtkit", "serve", "-m", ckpt, "--port", str(port)],
                              capture_output=True, text=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("nmtkit: error: cannot listen on 127.0.0.1:") and str(port) in last


def test_serve_help_documents_loopback_default_and_limits():
    proc = subprocess.run([sys.executable, "-m", "nmtkit", "serve", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0
    for option in ("--host", "127.0.0.1", "--batch-delay-ms", "--max-lines", "--max-line-chars",
                   "--max-body-bytes", "--beam", "--quiet"):
        assert option in proc.stdout


def test_connections_past_the_open_files_limit_wait_with_one_line_not_a_traceback_per_try(ckpt):
    """At `ulimit -n` open connections asyncio logged a traceback for every accept() it retried
    (128 a second); the server says it in one line a second and goes on serving."""
    import resource

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "nmtkit", "serve", "-m", ckpt, "--port", str(port)],
                            stderr=subprocess.PIPE, env=dict(os.environ, OMP_NUM_THREADS="1"), text=True,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (100, 100)))
    try:
        assert "serving" in proc.stderr.readline()
        conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(150)]
        time.sleep(2.5)
        for conn in conns:
            conn.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        stderr = proc.communicate(timeout=60)[1]
    assert proc.returncode == 0 and "Traceback" not in stderr, stderr[-2000:]
    said = [line for line in stderr.splitlines() if "open files" in line]
    assert 1 <= len(said) <= 4, stderr[-2000:]
