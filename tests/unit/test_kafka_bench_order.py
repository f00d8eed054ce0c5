"""The kafka section measures a row's sides in an order that moves one along each run, so that
no side always comes first after the produce rows (docs/BENCHMARKS.md, the kafka section)."""

from __future__ import annotations

from collections import Counter

from loadtests.benchmarks.kafka import rotated
from loadtests.benchmarks.kafka_clients import PRODUCE_SIDES, READ_SIDES


def test_run_zero_keeps_the_declared_order() -> None:
    assert rotated(READ_SIDES, 0) == READ_SIDES
    assert rotated(PRODUCE_SIDES, 0) == PRODUCE_SIDES


def test_every_side_comes_first_equally_and_each_run_measures_them_all() -> None:
    for sides in (READ_SIDES, PRODUCE_SIDES):
        orders = [rotated(sides, r) for r in range(3 * len(sides))]
        assert all(sorted(o) == sorted(sides) for o in orders)
        assert Counter(o[0] for o in orders) == {s: 3 for s in sides}
    assert rotated(READ_SIDES, 1) == ("lean", "kafka", "friendly")
