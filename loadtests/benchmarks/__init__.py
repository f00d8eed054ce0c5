"""The benchmark harness: ``loadtests/bench`` (``__main__``) runs the sections of
:data:`loadtests.benchmarks.sections.SECTIONS` and writes every figure of docs/BENCHMARKS.md.

Shared pieces: :mod:`.servers` (the processes a benchmark starts), :mod:`.clients` (lean
Thrift and Redis clients), :mod:`.workloads` (client processes and one measurement),
:mod:`.stats` (figures and the machine), :mod:`.context` (what a section gets and returns),
:mod:`.charts`. Each other module is a section, most also runnable alone
(``python -m loadtests.benchmarks.<section> --help``).

The harness starts the gateway as a process and imports none of its modules (a unit test,
tests/unit/test_package_direction.py, checks it).
"""
