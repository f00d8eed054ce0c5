"""In-process simulation of partition assignment: balance, movement and computing time.

``python -m gateway.cluster.simulate [--gateways 100] [--partitions 100000] [--seed 1]``

For two layouts of queues (all of 100 partitions; a mix of sizes 1..32767) it assigns from
scratch, then lets one gateway join, one leave, and three be killed, and prints per step the
time :func:`assign` took, the partitions that moved against the ideal (the newcomer's share, or
what the departed owned), and the largest max-min spread of owned partitions per queue and in
total (the balance rules require both to be at most 1).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gateway.cluster.assign import assign, moves
from gateway.rowkey import MAX_PARTITIONS

UNIFORM_SIZE = 100


@dataclass(frozen=True)
class Step:
    name: str
    gateways: int
    seconds: float
    moved: int
    ideal: int
    queue_spread: int
    total_spread: int


def layouts(partitions: int, seed: int) -> dict[str, dict[str, int]]:
    """Queue sizes: all of 100 partitions, and a log-uniform mix of 1..32767 (same total)."""
    uniform: dict[str, int] = {}
    for i, start in enumerate(range(0, partitions, UNIFORM_SIZE)):
        uniform[f"u{i:05d}"] = min(UNIFORM_SIZE, partitions - start)
    rng = random.Random(seed)
    mixed: dict[str, int] = {}
    left = partitions
    while left > 0:
        size = min(left, int(2 ** rng.uniform(0, 15)), MAX_PARTITIONS)
        mixed[f"m{len(mixed):05d}"] = max(1, size)
        left -= max(1, size)
    return {"uniform": uniform, "mixed": mixed}


def spreads(
    partitions: Mapping[str, int], members: Sequence[str], owners: Mapping[str, Sequence[str]]
) -> tuple[int, int]:
    """(largest max-min owned per queue, max-min owned in total) over ``members``."""
    totals: Counter[str] = Counter()
    worst = 0
    for q in partitions:
        counts = Counter(owners[q])
        per = [counts[m] for m in members]
        worst = max(worst, max(per) - min(per))
        totals.update(counts)
    per = [totals[m] for m in members]
    return worst, max(per) - min(per)


def run(partitions: Mapping[str, int], gateways: int, seed: int) -> list[Step]:
    """Initial assignment, a join, a leave, a kill of 3: one :class:`Step` each."""
    rng = random.Random(seed)
    members = [f"gw-{i:04d}" for i in range(gateways)]
    # the gateways as each step sees them, and the ones that went away (for the ideal)
    plan: list[tuple[str, list[str], list[str]]] = []
    plan.append(("initial", list(members), []))
    members = [*members, f"gw-{gateways:04d}"]
    plan.append(("join", list(members), []))
    gone = rng.choice(members)
    members = [m for m in members if m != gone]
    plan.append(("leave", list(members), [gone]))
    killed = rng.sample(members, min(3, len(members) - 1))
    members = [m for m in members if m not in killed]
    plan.append(("kill 3", list(members), killed))

    current: dict[str, list[str]] = {}
    steps = []
    for name, live, departed in plan:
        shuffled = rng.sample(live, len(live))  # the result must not depend on the order
        start = time.perf_counter()
        after = assign(partitions, shuffled, current)
        seconds = time.perf_counter() - start
        if not current:
            ideal = sum(partitions.values())
        elif departed:
            ideal = sum(o in departed for owners in current.values() for o in owners)
        else:
            before = {o for owners in current.values() for o in owners}
            ideal = sum(o not in before for owners in after.values() for o in owners)
        per_queue, total = spreads(partitions, live, after)
        steps.append(
            Step(name, len(live), seconds, len(moves(current, after)), ideal, per_queue, total)
        )
        current = after
    return steps


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gateway.cluster.simulate",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--gateways", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.gateways < 4:
        parser.error("--gateways: at least 4 (one leaves and three are killed)")
    if args.partitions < 1:
        parser.error("--partitions: at least 1")
    for layout, partitions in layouts(args.partitions, args.seed).items():
        print(f"{layout}: {len(partitions)} queues, {sum(partitions.values())} partitions")
        print(
            f"  {'step':<8} {'gateways':>8} {'ms':>8} {'moved':>7} {'ideal':>7} "
            f"{'queue_spread':>12} {'total_spread':>12}"
        )
        for s in run(partitions, args.gateways, args.seed):
            print(
                f"  {s.name:<8} {s.gateways:>8} {s.seconds * 1000:>8.1f} {s.moved:>7} "
                f"{s.ideal:>7} {s.queue_spread:>12} {s.total_spread:>12}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
