"""The benchmark sections find the repository's files: the hbase and cluster sections looked
for scripts/hbase-local under loadtests/ once their modules moved into loadtests/benchmarks/
(every run of either failed at once), and no test ran them."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import loadtests.benchmarks

ROOT = Path(__file__).resolve().parents[2]


def test_every_section_module_that_names_the_repository_names_it_rightly() -> None:
    named = []
    for info in pkgutil.iter_modules(loadtests.benchmarks.__path__):
        module = importlib.import_module(f"loadtests.benchmarks.{info.name}")
        root = getattr(module, "ROOT", None)
        if root is not None:
            named.append(info.name)
            assert Path(root).resolve() == ROOT, f"loadtests.benchmarks.{info.name}.ROOT = {root}"
    assert {"hbase", "cluster", "servers"} <= set(named)
    assert (ROOT / "scripts" / "hbase-local").is_file()
