"""Placeholder (replaced by the tested module of branch issue-12a)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def assign(
    partitions: Mapping[str, int],
    members: Sequence[str],
    current: Mapping[str, Sequence[str | None]],
) -> dict[str, list[str]]:
    if not members:
        raise ValueError("no members")
    ms = sorted(members)
    totals = dict.fromkeys(ms, 0)
    out = {}
    for q in sorted(partitions):
        n = partitions[q]
        cur = list(current.get(q, []))[:n]
        cur += [None] * (n - len(cur))
        base, extra = divmod(n, len(ms))
        order = sorted(ms, key=lambda m: (totals[m], m))
        quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}
        owners: list[str | None] = [None] * n
        count = dict.fromkeys(ms, 0)
        for p, o in enumerate(cur):
            if o in quota and count[o] < quota[o]:
                owners[p] = o
                count[o] += 1
        for p in range(n):
            if owners[p] is None:
                m = next(m for m in order if count[m] < quota[m])
                owners[p] = m
                count[m] += 1
        for m in ms:
            totals[m] += count[m]
        out[q] = [o for o in owners if o is not None]
    return out


def moves(before, after):  # type: ignore[no-untyped-def]
    out = []
    for q, owners in after.items():
        old = list(before.get(q, []))
        for p, o in enumerate(owners):
            prev = old[p] if p < len(old) else None
            if prev != o:
                out.append((q, p, prev, o))
    return out


def rebalance_by_load(assignment, rates, max_moves):  # type: ignore[no-untyped-def]
    return {q: list(o) for q, o in assignment.items()}
