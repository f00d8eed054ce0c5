"""Which gateway owns which partition: a pure function of queues, live members and current owners.

No I/O here. The cluster layer reads members and owners from ZooKeeper, calls :func:`assign`
and writes the difference (:func:`moves`). Everything is deterministic, so any gateway that
computes an assignment from the same snapshot gets the same answer.

The two balance rules:

* per queue, every member owns ``floor(P/N)`` or ``ceil(P/N)`` of its ``P`` partitions;
* in total, no member owns more than one partition above another.

Per queue every member gets the base ``P // N``; the ``P % N`` "extras" of each queue go to
distinct members. Totals stay within one exactly when every member holds ``E // N`` or
``E // N + 1`` extras in all (``E`` = the extras of all queues), so the work is to choose the
holders of the extras: first the members that already own more than the base of that queue
(they keep a partition they have), then the others, repaired by augmenting paths when a greedy
choice paints itself into a corner. Owners then keep their partitions up to their quota and the
freed ones go to the members under quota.
"""

from __future__ import annotations

import bisect
import itertools
from collections import deque
from collections.abc import Container, Mapping, Sequence

Assignment = dict[str, list[str]]
Move = tuple[str, int, "str | None", str]


def assign(
    partitions: Mapping[str, int],
    members: Sequence[str],
    current: Mapping[str, Sequence[str | None]],
) -> Assignment:
    """Return queue -> owner per partition, balanced and moving as little as it can.

    ``partitions``: queue -> partition count. ``members``: live gateway ids, in any order.
    ``current``: queue -> owner per partition; ``None``, an id not in ``members``, a missing
    queue or a list shorter than the queue mean unowned; entries past the queue's partition
    count and queues not in ``partitions`` are ignored. Raises ``ValueError`` naming the
    argument on bad input (no members, a negative count, a duplicate member).
    """
    live = _check_members(members)
    n = len(live)
    index = {m: i for i, m in enumerate(live)}
    names = sorted(partitions)
    plans = [_QueuePlan(q, _check_count(q, partitions[q]), n, index, current.get(q)) for q in names]
    holders = _choose_extras(plans, n)
    return {
        plan.name: [live[o] for o in _place(plan, holders[k], n)] for k, plan in enumerate(plans)
    }


def moves(
    before: Mapping[str, Sequence[str | None]], after: Mapping[str, Sequence[str]]
) -> list[tuple[str, int, str | None, str]]:
    """(queue, partition, old owner, new owner) for every partition whose owner changes.

    A partition missing from ``before`` has old owner ``None``; sorted by queue and partition.
    """
    out: list[tuple[str, int, str | None, str]] = []
    for q in sorted(after):
        old = before.get(q, ())
        for p, new in enumerate(after[q]):
            prev = old[p] if p < len(old) else None
            if prev != new:
                out.append((q, p, prev, new))
    return out


class _QueuePlan:
    """One queue: its size, base share, extras and current live owners (member indices)."""

    __slots__ = ("base", "counts", "extras", "name", "owners", "preferred", "size")

    def __init__(
        self,
        name: str,
        size: int,
        n: int,
        index: Mapping[str, int],
        owners: Sequence[str | None] | None,
    ) -> None:
        self.name = name
        self.size = size
        self.base, self.extras = divmod(size, n)
        cur: list[int] = []
        counts: dict[int, int] = {}
        if owners is not None:
            if isinstance(owners, (str, bytes)):
                raise ValueError(f"current[{name!r}]: must be a list of owners, not a string")
            for o in owners[:size]:
                i = index.get(o, -1) if isinstance(o, str) else -1
                if i < 0 and o is not None and not isinstance(o, str):
                    raise ValueError(f"current[{name!r}]: owner {o!r} is not a str or None")
                cur.append(i)
                if i >= 0:
                    counts[i] = counts.get(i, 0) + 1
        cur.extend([-1] * (size - len(cur)))
        self.owners = cur
        self.counts = counts
        # Members that keep one more partition if they hold one of this queue's extras, most
        # owned first: giving them the extras is what keeps movement low.
        if self.extras:
            above = self.base + 1
            self.preferred = sorted(
                (i for i, c in counts.items() if c >= above), key=lambda i: (-counts[i], i)
            )
        else:
            self.preferred = []


def _check_members(members: Sequence[str]) -> list[str]:
    if isinstance(members, (str, bytes)):
        raise ValueError("members: must be a sequence of gateway ids, not a string")
    live = sorted(members)
    if not live:
        raise ValueError("members: at least one live gateway is needed")
    for a, b in itertools.pairwise(live):
        if a == b:
            raise ValueError(f"members: {a!r} is listed twice")
    for m in live:
        if not isinstance(m, str):
            raise ValueError(f"members: {m!r} is not a str")
    return live


def _check_count(queue: str, count: int) -> int:
    if not isinstance(queue, str):
        raise ValueError(f"partitions: queue name {queue!r} is not a str")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"partitions[{queue!r}]: {count!r} is not a partition count (int >= 0)")
    return count


def _choose_extras(plans: list[_QueuePlan], n: int) -> list[dict[int, None]]:
    """For every queue, the distinct members that own base + 1 of it (an ordered set each).

    Every member ends with ``E // N`` or ``E // N + 1`` extras in all, which is what keeps the
    totals within one.
    """
    total = sum(p.extras for p in plans)
    floor, rem = divmod(total, n)
    # Pass 1: every queue's extras to the members that already own more than its base, then
    # the members holding more than their target give some back.
    holders: list[dict[int, None]] = []
    held = [0] * n
    for p in plans:
        chosen = dict.fromkeys(p.preferred[: p.extras])
        for i in chosen:
            held[i] += 1
        holders.append(chosen)
    # Who may hold one extra more than the others: those that would keep the most partitions.
    target = [floor] * n
    for i in sorted(range(n), key=lambda i: (-held[i], i))[:rem]:
        target[i] += 1
    room = [t - h for t, h in zip(target, held, strict=True)]
    of_member: list[list[int]] = [[] for _ in range(n)]
    for k, chosen in enumerate(holders):
        for i in chosen:
            if room[i] < 0:
                of_member[i].append(k)
    # Give back where the fewest were given back so far: one slot freed per queue is one the
    # members with room can refill without any further move (a member holds one extra per
    # queue at most, so a join's newcomer can only take one per queue).
    dropped = [0] * len(plans)
    for i in sorted((i for i in range(n) if room[i] < 0), key=lambda i: (room[i], i)):
        for k in sorted(of_member[i], key=lambda k: dropped[k])[: -room[i]]:
            del holders[k][i]
            dropped[k] += 1
            # a preferred member left out of this queue for lack of slots takes it, if it can
            for j in plans[k].preferred[plans[k].extras :]:
                if j not in holders[k] and room[j] > 0:
                    holders[k][j] = None
                    room[j] -= 1
                    break
        room[i] = 0

    # Pass 2: the rest, each to the members with the most room left (Ryser's greedy for a
    # bipartite degree sequence), the neediest queues first.
    pool = _Pool(room)
    short = [k for k in range(len(plans)) if len(holders[k]) < plans[k].extras]
    short.sort(key=lambda k: len(holders[k]) - plans[k].extras)
    stuck: list[int] = []
    for k in short:
        chosen = holders[k]
        for i in pool.take(plans[k].extras - len(chosen), chosen):
            chosen[i] = None
        if len(chosen) < plans[k].extras:
            _shift_targets(plans[k], chosen, pool, target, floor)
        if len(chosen) < plans[k].extras:
            stuck.append(k)
    if stuck:
        _augment(plans, holders, pool, stuck, n)
    return holders


def _shift_targets(
    plan: _QueuePlan, chosen: dict[int, None], pool: _Pool, target: list[int], floor: int
) -> None:
    """Let a full member outside the queue take an extra by handing it another one's +1.

    The only members left with room already hold an extra of this queue. If one of them was to
    end with ``floor + 1`` extras, a member outside the queue that is full at ``floor`` can end
    with ``floor + 1`` instead: the totals stay within one and no other queue changes.
    """
    donors = [i for i in chosen if pool.room[i] > 0 and target[i] == floor + 1]
    if not donors:
        return
    # members that own the most of this queue lose the least by taking its extra
    takers = sorted(
        (i for i in range(len(target)) if i not in chosen and target[i] == floor),
        key=lambda i: (-plan.counts.get(i, 0), i),
    )
    for donor, taker in zip(donors, takers, strict=False):
        if len(chosen) == plan.extras:
            break
        pool.consume(donor)
        target[donor] -= 1
        target[taker] += 1
        chosen[taker] = None


class _Pool:
    """Members with room for more extras, bucketed by room left; the most room is taken first."""

    def __init__(self, room: list[int]) -> None:
        self.room = room
        self.buckets: dict[int, dict[int, None]] = {}
        for i, r in enumerate(room):
            if r > 0:
                self.buckets.setdefault(r, {})[i] = None
        self.keys = sorted(self.buckets)

    def take(self, count: int, exclude: Container[int]) -> list[int]:
        """Up to ``count`` distinct members not in ``exclude``, each losing one unit of room."""
        taken: list[int] = []
        for r in reversed(self.keys):
            for i in self.buckets[r]:
                if i not in exclude:
                    taken.append(i)
                    if len(taken) == count:
                        break
            if len(taken) == count:
                break
        for i in taken:
            self.consume(i)
        return taken

    def consume(self, i: int) -> None:
        r = self.room[i]
        bucket = self.buckets[r]
        del bucket[i]
        if not bucket:
            del self.buckets[r]
            self.keys.remove(r)
        self.room[i] = r - 1
        if r > 1:
            if r - 1 not in self.buckets:
                self.buckets[r - 1] = {}
                bisect.insort(self.keys, r - 1)
            self.buckets[r - 1][i] = None


def _augment(
    plans: list[_QueuePlan], holders: list[dict[int, None]], pool: _Pool, stuck: list[int], n: int
) -> None:
    """Complete the queues the greedy left short, along augmenting paths.

    A path: queue q takes member m1 (full), which gives up its extra of queue q1, which takes
    m2 instead, ..., until a member with room. It exists whenever a complete choice does, and
    one always does: every queue needs fewer than N distinct members and the members' targets
    differ by at most one (Gale-Ryser).
    """
    of_member: list[set[int]] = [set() for _ in range(n)]
    for k, chosen in enumerate(holders):
        for i in chosen:
            of_member[i].add(k)
    pending = deque(stuck)
    # A path may start only from another short queue; give up after a round without one.
    failed = 0
    while pending:
        k = pending.popleft()
        if _augment_once(k, holders, pool, of_member, n):
            failed = 0
        else:
            failed += 1
            if failed > len(pending):
                raise AssertionError(f"no complete choice of extras for queue {plans[k].name!r}")
        if len(holders[k]) < plans[k].extras:
            pending.append(k)


def _augment_once(
    start: int, holders: list[dict[int, None]], pool: _Pool, of_member: list[set[int]], n: int
) -> bool:
    # parent[m] = (previous member or -1, queue that moves its extra from there to m)
    parent: dict[int, tuple[int, int]] = {}
    frontier: deque[int] = deque()
    unvisited = set(holders[start])
    for m in range(n):
        if m not in unvisited:
            parent[m] = (-1, start)
            frontier.append(m)
    end = next((m for m in frontier if pool.room[m] > 0), -1)
    while end < 0 and frontier and unvisited:
        m = frontier.popleft()
        for k in sorted(of_member[m]):
            fresh = unvisited.difference(holders[k])
            for m2 in sorted(fresh):
                parent[m2] = (m, k)
                unvisited.discard(m2)
                if pool.room[m2] > 0:
                    end = m2
                    break
                frontier.append(m2)
            if end >= 0 or not unvisited:
                break
    if end < 0:
        return False
    pool.consume(end)
    m = end
    while True:
        prev, k = parent[m]
        if prev >= 0:
            del holders[k][prev]
            of_member[prev].discard(k)
        holders[k][m] = None
        of_member[m].add(k)
        if prev < 0:
            return True
        m = prev


def _place(plan: _QueuePlan, extra: dict[int, None], n: int) -> list[int]:
    """Owners of one queue: current owners keep up to their quota, the rest go to those under."""
    base = plan.base
    kept: dict[int, int] = {}
    result = [-1] * plan.size
    freed: list[int] = []
    for p, o in enumerate(plan.owners):
        if o >= 0:
            k = kept.get(o, 0)
            if k < base + (o in extra):
                kept[o] = k + 1
                result[p] = o
                continue
        freed.append(p)
    if freed:
        j = 0
        for m in range(n) if base else sorted(extra):
            for _ in range(base + (m in extra) - kept.get(m, 0)):
                result[freed[j]] = m
                j += 1
    return result


def rebalance_by_load(
    assignment: Mapping[str, Sequence[str]],
    rates: Mapping[tuple[str, int], float],
    max_moves: int,
) -> Assignment:
    """Even out the members' summed put rates without breaking either balance rule.

    ``rates``: messages/s per (queue, partition); a missing one counts as 0. Moves only
    partitions within a queue: a swap between two members (two moves), or a single move from a
    member that owns more of the queue and more in total to one that owns fewer of both (so
    every count stays within one). Greedy: the busiest member trades with the idlest one that
    it can improve on, the pair whose loads then come closest, until no trade lowers the
    busiest member's load or the next one would change more than ``max_moves`` owners.
    """
    if isinstance(max_moves, bool) or not isinstance(max_moves, int) or max_moves < 0:
        raise ValueError(f"max_moves: {max_moves!r} is not a count (int >= 0)")
    result = {q: list(owners) for q, owners in assignment.items()}
    load: dict[str, float] = {}
    total: dict[str, int] = {}
    # owned[m][q]: the partitions of q that m owns
    owned: dict[str, dict[str, list[int]]] = {}
    for q, owners in result.items():
        for p, m in enumerate(owners):
            if not isinstance(m, str):
                raise ValueError(f"assignment[{q!r}][{p}]: owner {m!r} is not a str")
            load[m] = load.get(m, 0.0) + _rate(rates, q, p)
            total[m] = total.get(m, 0) + 1
            owned.setdefault(m, {}).setdefault(q, []).append(p)
    used = 0
    while used < max_moves:
        trade = _best_trade(result, rates, load, total, owned, max_moves - used)
        if trade is None:
            break
        q, hi, lo, give, take = trade
        _transfer(result, rates, load, total, owned, q, give, hi, lo)
        used += 1
        if take is not None:
            _transfer(result, rates, load, total, owned, q, take, lo, hi)
            used += 1
    return result


def _rate(rates: Mapping[tuple[str, int], float], q: str, p: int) -> float:
    r = rates.get((q, p), 0.0)
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0.0 <= r < float("inf"):
        raise ValueError(f"rates[({q!r}, {p})]: {r!r} is not a rate (finite, >= 0)")
    return float(r)


def _best_trade(
    result: Mapping[str, list[str]],
    rates: Mapping[tuple[str, int], float],
    load: Mapping[str, float],
    total: Mapping[str, int],
    owned: Mapping[str, Mapping[str, list[int]]],
    budget: int,
) -> tuple[str, str, str, int, int | None] | None:
    """(queue, busy member, idle member, partition it gives, partition it takes or None)."""
    by_load = sorted(load, key=lambda m: (load[m], m))
    if len(by_load) < 2:
        return None
    hi = by_load[-1]
    for lo in by_load[:-1]:
        gap = load[hi] - load[lo]
        # below this the trade would not lower the busiest load by a meaningful amount
        if gap <= 1e-9 * max(1.0, load[hi]):
            return None
        half = gap / 2
        best: tuple[float, str, int, int | None] | None = None  # (|d - gap/2|, q, give, take)
        for q, mine in owned[hi].items():
            theirs = owned[lo].get(q, [])
            mine_r = sorted((_rate(rates, q, p), p) for p in mine)
            if len(mine) > len(theirs) and total[hi] > total[lo]:
                # a single move of the partition whose rate is closest to half the gap
                i = bisect.bisect_left(mine_r, (half, -1))
                for r, p in mine_r[max(0, i - 1) : i + 1]:
                    if 0 < r < gap and (best is None or abs(r - half) < best[0]):
                        best = (abs(r - half), q, p, None)
            if theirs and budget >= 2:
                theirs_r = sorted((_rate(rates, q, p), p) for p in theirs)
                for ra, a in mine_r:
                    # the partition to take back whose rate is closest to ra - gap/2
                    j = bisect.bisect_left(theirs_r, (ra - half, -1))
                    for rb, b in theirs_r[max(0, j - 1) : j + 1]:
                        d = ra - rb
                        if 0 < d < gap and (best is None or abs(d - half) < best[0]):
                            best = (abs(d - half), q, a, b)
        if best is not None:
            return best[1], hi, lo, best[2], best[3]
    return None


def _transfer(
    result: dict[str, list[str]],
    rates: Mapping[tuple[str, int], float],
    load: dict[str, float],
    total: dict[str, int],
    owned: dict[str, dict[str, list[int]]],
    q: str,
    p: int,
    src: str,
    dst: str,
) -> None:
    r = _rate(rates, q, p)
    result[q][p] = dst
    load[src] -= r
    load[dst] += r
    total[src] -= 1
    total[dst] += 1
    owned[src][q].remove(p)
    if not owned[src][q]:
        del owned[src][q]
    owned[dst].setdefault(q, []).append(p)
