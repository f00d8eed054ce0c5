"""Partition assignment: the balance rules, minimal movement, determinism, load rebalancing."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.cluster import simulate
from gateway.cluster.assign import assign, moves, rebalance_by_load

POOL = [f"g{i}" for i in range(10)]

queue_sizes = st.one_of(st.integers(0, 12), st.integers(0, 150))
partitions_st = st.dictionaries(
    st.sampled_from([f"q{i}" for i in range(8)]), queue_sizes, max_size=6
)
members_st = st.lists(st.sampled_from(POOL), min_size=1, max_size=8, unique=True)


@st.composite
def currents(draw: st.DrawFn, partitions: Mapping[str, int]) -> dict[str, list[str | None]]:
    """Owners from the whole pool (so some are dead), None, short and long lists, missing queues."""
    out: dict[str, list[str | None]] = {}
    for q, size in partitions.items():
        if draw(st.booleans()):
            length = draw(st.integers(0, size + 2))
            out[q] = draw(
                st.lists(st.sampled_from([*POOL, None]), min_size=length, max_size=length)
            )
    return out


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[dict[str, int], list[str], dict[str, list[str | None]]]:
    partitions = draw(partitions_st)
    return partitions, draw(members_st), draw(currents(partitions))


def check_valid(
    partitions: Mapping[str, int], members: Sequence[str], result: Mapping[str, Sequence[str]]
) -> None:
    assert set(result) == set(partitions)
    for q, size in partitions.items():
        assert len(result[q]) == size
        assert set(result[q]) <= set(members)


def per_queue_spread(
    partitions: Mapping[str, int], members: Sequence[str], result: Mapping[str, Sequence[str]]
) -> int:
    worst = 0
    for q in partitions:
        counts = Counter(result[q])
        per = [counts[m] for m in members]
        worst = max(worst, max(per) - min(per))
    return worst


def total_spread(members: Sequence[str], result: Mapping[str, Sequence[str]]) -> int:
    totals = Counter(o for owners in result.values() for o in owners)
    per = [totals[m] for m in members]
    return max(per) - min(per)


def moved(before: Mapping[str, Sequence[str | None]], after: Mapping[str, Sequence[str]]) -> int:
    return len(moves(before, after))


def owned(result: Mapping[str, Sequence[str]], member: str) -> int:
    return sum(owners.count(member) for owners in result.values())


def with_extras(partitions: Mapping[str, int], n: int) -> int:
    return sum(1 for size in partitions.values() if size % n)


# --- the rules -----------------------------------------------------------------------------


@given(scenarios())
def test_every_partition_has_exactly_one_live_owner(s: tuple) -> None:
    partitions, members, current = s
    check_valid(partitions, members, assign(partitions, members, current))


@given(scenarios())
def test_per_queue_every_member_owns_floor_or_ceil(s: tuple) -> None:
    partitions, members, current = s
    result = assign(partitions, members, current)
    n = len(members)
    for q, size in partitions.items():
        counts = Counter(result[q])
        for m in members:
            assert size // n <= counts[m] <= -(-size // n), (q, m, counts)


@given(scenarios())
def test_in_total_no_member_owns_more_than_one_above_another(s: tuple) -> None:
    partitions, members, current = s
    assert total_spread(members, assign(partitions, members, current)) <= 1


@given(scenarios(), st.randoms(use_true_random=False))
def test_result_depends_neither_on_member_order_nor_on_the_call(s: tuple, rnd) -> None:
    partitions, members, current = s
    shuffled = list(members)
    rnd.shuffle(shuffled)
    first = assign(partitions, members, current)
    assert assign(partitions, shuffled, current) == first
    assert assign(dict(reversed(list(partitions.items()))), members, current) == first


def relabeled(
    assignment: Mapping[str, Sequence[str]], members: Sequence[str], rnd
) -> dict[str, list[str]]:
    """A balanced assignment assign() would not make itself: its members renamed at random."""
    names = list(members)
    rnd.shuffle(names)
    rename = dict(zip(members, names, strict=True))
    return {q: [rename[o] for o in owners] for q, owners in assignment.items()}


@given(scenarios(), st.randoms(use_true_random=False))
def test_a_balanced_assignment_is_left_alone(s: tuple, rnd) -> None:
    partitions, members, current = s
    settled = relabeled(assign(partitions, members, current), members, rnd)
    assert moved(settled, assign(partitions, list(reversed(members)), settled)) == 0


@given(scenarios())
def test_owners_only_lose_what_is_above_their_share(s: tuple) -> None:
    # In each queue a live owner keeps at least min(what it owns, floor(P/N)), and no member
    # both gives partitions away and receives some: nothing moves around in circles.
    partitions, members, current = s
    result = assign(partitions, members, current)
    n = len(members)
    for q, size in partitions.items():
        before = list(current.get(q, []))[:size]
        before += [None] * (size - len(before))
        losers = {b for b, a in zip(before, result[q], strict=True) if b != a and b in members}
        gainers = {a for b, a in zip(before, result[q], strict=True) if b != a}
        assert not losers & gainers
        kept = Counter(a for b, a in zip(before, result[q], strict=True) if a == b)
        had = Counter(b for b in before if b in members)
        for m in had:
            assert kept[m] >= min(had[m], size // n)


def optimum(
    partitions: Mapping[str, int],
    members: Sequence[str],
    current: Mapping[str, Sequence[str | None]],
) -> int:
    """Fewest moves of any assignment that keeps both rules, by trying every choice of extras."""
    n = len(members)
    names = sorted(partitions)
    best = None
    for combo in itertools.product(
        *(itertools.combinations(members, partitions[q] % n) for q in names)
    ):
        extras = Counter(m for chosen in combo for m in chosen)
        if max(extras[m] for m in members) - min(extras[m] for m in members) > 1:
            continue
        cost = 0
        for q, chosen in zip(names, combo, strict=True):
            size = partitions[q]
            had = Counter(o for o in list(current.get(q, []))[:size] if o in members)
            cost += size - sum(min(had[m], size // n + (m in chosen)) for m in members)
        best = cost if best is None else min(best, cost)
    assert best is not None
    return best


@settings(max_examples=300)
@given(
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 13), max_size=3),
    st.lists(st.sampled_from(POOL[:5]), min_size=1, max_size=4, unique=True),
    st.data(),
)
def test_movement_is_within_one_of_the_optimum(partitions, members, data) -> None:
    # Exhaustive optimum on small cases. The greedy finds it almost always (measured: all of
    # 1,500 random current maps, 99% of joins and leaves); where it misses, by one move.
    current = data.draw(currents(partitions))
    result = assign(partitions, members, current)
    assert moved(current, result) <= optimum(partitions, members, current) + 1


@given(partitions_st, members_st, st.randoms(use_true_random=False))
def test_a_join_moves_about_the_newcomers_share(partitions, members, rnd) -> None:
    before = relabeled(assign(partitions, members, {}), members, rnd)
    new = next(g for g in POOL if g not in members)
    after = assign(partitions, [*members, new], before)
    share = owned(after, new)
    assert sum(partitions.values()) // (len(members) + 1) <= share
    # beyond the newcomer's share, at most a few to restore the total balance
    assert moved(before, after) <= share + with_extras(partitions, len(members) + 1) + 2


@given(
    partitions_st,
    members_st.filter(lambda ms: len(ms) >= 2),
    st.data(),
    st.randoms(use_true_random=False),
)
def test_a_leave_or_a_kill_moves_the_departed_partitions(partitions, members, data, rnd) -> None:
    before = relabeled(assign(partitions, members, {}), members, rnd)
    gone = data.draw(
        st.lists(
            st.sampled_from(members), min_size=1, max_size=min(3, len(members) - 1), unique=True
        )
    )
    live = [m for m in members if m not in gone]
    after = assign(partitions, live, before)
    orphaned = sum(owned(before, g) for g in gone)
    assert moved(before, after) >= orphaned
    assert moved(before, after) <= orphaned + with_extras(partitions, len(live)) + 2


# --- exact small examples ------------------------------------------------------------------


def test_from_scratch_owners_are_contiguous_in_member_order() -> None:
    assert assign({"q": 4}, ["b", "a"], {}) == {"q": ["a", "a", "b", "b"]}
    assert assign({"q": 0, "r": 1}, ["a"], {}) == {"q": [], "r": ["a"]}


def test_a_join_takes_one_partition_from_the_owner_with_the_fewest_extras() -> None:
    assert assign({"q": 4}, ["a", "b", "c"], {"q": ["a", "a", "b", "b"]}) == {
        "q": ["a", "a", "b", "c"]
    }


def test_dead_unowned_and_missing_partitions_go_to_members_under_quota() -> None:
    current = {"q": ["x", "x", "a", "a"], "r": ["a", None], "gone": ["a"]}
    assert assign({"q": 4, "r": 3, "s": 1}, ["a", "b"], current) == {
        "q": ["b", "b", "a", "a"],
        "r": ["a", "a", "b"],
        "s": ["b"],
    }


def test_a_full_member_takes_an_extra_when_the_only_room_is_already_in_the_queue() -> None:
    # Totals are balanced already (2, 2, 2, 1 over 7); q0 has one partition too many on a.
    # The only member with room left for an extra is a, already in q0: b takes a's +1.
    current = {"q0": ["a", "a", "c"], "q1": ["d"], "q2": ["c", "b", "d"]}
    result = assign({"q0": 3, "q1": 1, "q2": 3}, ["a", "b", "c", "d"], current)
    assert result == {"q0": ["a", "b", "c"], "q1": ["d"], "q2": ["c", "b", "d"]}


def test_an_extra_travels_along_an_augmenting_path() -> None:
    # The greedy leaves a queue short and no +1 can be handed over; a path repairs it.
    current = {
        "q0": ["d", "f", "x", "a", "x", "a", "b"],
        "q1": ["c", "b", "e", "c"],
        "q2": ["a", "d", "x", "x"],
    }
    partitions = {"q0": 7, "q1": 4, "q2": 4}
    members = ["a", "b", "c", "d", "e"]
    result = assign(partitions, members, current)
    check_valid(partitions, members, result)
    assert per_queue_spread(partitions, members, result) <= 1
    assert total_spread(members, result) <= 1
    assert moved(current, result) <= optimum(partitions, members, current) + 1


def test_a_join_over_small_queues_moves_exactly_the_newcomers_share() -> None:
    # Every queue is smaller than the cluster: the newcomer can take one partition per queue,
    # so the members that give one up must each do it in a different queue.
    partitions = {f"q{i:02d}": 3 for i in range(20)}
    members = [f"g{i}" for i in range(10)]
    before = assign(partitions, members, {})
    after = assign(partitions, [*members, "new"], before)
    assert owned(after, "new") == 5
    assert moved(before, after) == 5


def test_moves_lists_every_change() -> None:
    assert moves({"q": ["a", None, "b"]}, {"q": ["a", "b", "c"], "r": ["a"]}) == [
        ("q", 1, None, "b"),
        ("q", 2, "b", "c"),
        ("r", 0, None, "a"),
    ]


@pytest.mark.parametrize(
    ("partitions", "members", "current", "argument"),
    [
        ({"q": 1}, [], {}, "members"),
        ({"q": 1}, ["a", "a"], {}, "members"),
        ({"q": 1}, "ab", {}, "members"),
        ({"q": -1}, ["a"], {}, "partitions['q']"),
        ({"q": True}, ["a"], {}, "partitions['q']"),
        ({"q": 1.0}, ["a"], {}, "partitions['q']"),
        ({"q": 1}, ["a"], {"q": "a"}, "current['q']"),
        ({"q": 1}, ["a"], {"q": [1]}, "current['q']"),
    ],
)
def test_bad_input_is_a_value_error_naming_the_argument(
    partitions, members, current, argument
) -> None:
    with pytest.raises(ValueError, match=re.escape(argument)):
        assign(partitions, members, current)


# --- rebalancing by load -------------------------------------------------------------------


def loads(
    assignment: Mapping[str, Sequence[str]], rates: Mapping[tuple[str, int], float]
) -> Counter[str]:
    out: Counter[str] = Counter()
    for q, owners in assignment.items():
        for p, m in enumerate(owners):
            out[m] += rates.get((q, p), 0.0)
    return out


@given(partitions_st, members_st, st.data(), st.integers(0, 12))
def test_rebalancing_keeps_the_rules_and_the_budget_and_never_raises_the_peak(
    partitions, members, data, max_moves
) -> None:
    before = assign(partitions, members, {})
    rates = {
        (q, p): data.draw(st.floats(0, 1000))
        for q, size in partitions.items()
        for p in range(size)
        if data.draw(st.booleans())
    }
    after = rebalance_by_load(before, rates, max_moves)
    check_valid(partitions, members, after)
    assert per_queue_spread(partitions, members, after) <= 1
    assert total_spread(members, after) <= 1
    assert moved(before, after) <= max_moves
    if before and any(before.values()):
        assert max(loads(after, rates).values()) <= max(loads(before, rates).values()) + 1e-6


def test_rebalancing_swaps_within_a_queue() -> None:
    before = {"q": ["a", "a", "b", "b"]}
    rates = {("q", 0): 6.0, ("q", 1): 4.0}
    assert rebalance_by_load(before, rates, 2) == {"q": ["a", "b", "a", "b"]}
    # a swap is two moves; one is not allowed to break the per-queue counts
    assert rebalance_by_load(before, rates, 1) == before
    assert rebalance_by_load(before, rates, 0) == before


def test_rebalancing_moves_one_partition_where_the_counts_allow() -> None:
    before = {"q": ["a", "a", "b"]}
    assert rebalance_by_load(before, {("q", 0): 5.0, ("q", 1): 5.0}, 1) == {"q": ["b", "a", "b"]}


def test_rebalancing_evens_out_a_skewed_cluster() -> None:
    partitions = {f"q{i}": 20 for i in range(10)}
    members = [f"g{i}" for i in range(5)]
    before = assign(partitions, members, {})
    # g0's partitions are the hot ones
    rates = {
        (q, p): 100.0 if o == "g0" else float(p % 3)
        for q, owners in before.items()
        for p, o in enumerate(owners)
    }
    spread_before = max(loads(before, rates).values()) - min(loads(before, rates).values())
    # g0 must give away about 32 hot partitions, one per swap of two moves
    after = rebalance_by_load(before, rates, 80)
    spread_after = max(loads(after, rates).values()) - min(loads(after, rates).values())
    assert spread_after < spread_before / 10
    assert moved(before, after) <= 80


@pytest.mark.parametrize(
    ("rates", "max_moves", "argument"),
    [
        ({}, -1, "max_moves"),
        ({}, 1.5, "max_moves"),
        ({("q", 0): -1.0}, 1, "rates"),
        ({("q", 0): float("nan")}, 1, "rates"),
    ],
)
def test_rebalancing_bad_input_names_the_argument(rates, max_moves, argument) -> None:
    with pytest.raises(ValueError, match=argument):
        rebalance_by_load({"q": ["a", "b"]}, rates, max_moves)


# --- the simulation ------------------------------------------------------------------------


def test_simulation_prints_balanced_steps_that_move_about_the_ideal(capsys) -> None:
    assert simulate.main(["--gateways", "10", "--partitions", "2000"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(
        r"^\s+(initial|join|leave|kill 3)\s+(\d+)\s+([\d.]+)\s+(\d+)\s+(\d+)"
        r"\s+(\d+)\s+(\d+)$",
        out,
        re.MULTILINE,
    )
    assert [r[0] for r in rows] == ["initial", "join", "leave", "kill 3"] * 2, out
    for _name, _gateways, _ms, moved_, ideal, queue_spread, total_spread_ in rows:
        assert int(queue_spread) <= 1 and int(total_spread_) <= 1, out
        assert int(ideal) <= int(moved_) <= int(ideal) * 1.1 + 10, out
    assert [int(r[1]) for r in rows[:4]] == [10, 11, 10, 7]
    assert rows[0][3] == rows[0][4] == "2000"
