"""One command for every figure in docs/BENCHMARKS.md: ``loadtests/bench`` (see ``__main__``).

Sections live in the modules listed in :data:`SECTION_MODULES` and register themselves with
:func:`loadtests.benchmarks.registry.section`; see that module for how to add one.
"""

from __future__ import annotations

import importlib

from loadtests.benchmarks.registry import SECTIONS, Result, Section, section

# in the order they run and appear in the report
SECTION_MODULES = (
    "loadtests.benchmarks.ceiling",
    "loadtests.benchmarks.scaling",
    "loadtests.benchmarks.latency",
    "loadtests.benchmarks.backlog",
    "loadtests.benchmarks.hbase",
    "loadtests.benchmarks.push",
    "loadtests.benchmarks.consumers",
    "loadtests.benchmarks.cluster",
    "loadtests.benchmarks.kafka",
    "loadtests.benchmarks.operating",
)


def load_sections() -> dict[str, Section]:
    """Imports the section modules (each registers its sections) and returns the registry."""
    for name in SECTION_MODULES:
        importlib.import_module(name)
    return SECTIONS


__all__ = ["SECTIONS", "SECTION_MODULES", "Result", "Section", "load_sections", "section"]
