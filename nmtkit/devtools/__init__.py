"""Instruments shared by the tests and the benchmarks: a kernel-launch counter, a host-read
counter (launches.py), a launcher of a real `nmtkit serve` subprocess (server.py) and the GPU
report's list of problems (report.py).

Nothing in the toolkit itself imports this package: it is for measuring and testing nmtkit,
not for running it (tests/test_devtools.py checks this).
"""
