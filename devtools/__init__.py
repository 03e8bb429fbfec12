"""Instruments shared by the tests and the benchmarks: a kernel-launch counter, a host-read
counter (launches.py), a launcher of a real `nmtkit serve` subprocess (server.py) and the GPU
report's list of problems (report.py).

A top-level package beside tests/ and benchmarks/, not part of the installed nmtkit: nothing
in the toolkit imports it (tests/test_devtools.py checks this). pytest finds it through the
`pythonpath` option in pyproject.toml; a benchmark script puts the repo root on sys.path.
"""
