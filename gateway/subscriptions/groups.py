"""Consumer groups (MetaQ's clustering): the members of a shared subscriber divide its
partitions.

Every member of a group is either a push member (it subscribed with its own address, which is
also its member id) or a pull member (it called ``pullMessages`` with its own memberID); the two
kinds are never mixed in one group. The assignment is a pure function of the sorted member ids
and the subscribed partitions, so every gateway computes the same one without talking: member
``k`` of ``n`` gets the partitions at positions ``k, k + n, k + 2n, ...``, hence the counts
differ by at most one. A membership change (join, clean stop, lease expiry after a crash)
restarts the group's workers with the new assignment from the group's checkpoints; each
partition is delivered by exactly one worker of this gateway, to one member at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

from .registry import Member


def assign(partitions: Sequence[int], members: Sequence[Member]) -> dict[int, Member]:
    """partition -> the member it is delivered to (none when there are no members)."""
    if not members:
        return {}
    ordered = sorted(members, key=lambda m: m.id)
    n = len(ordered)
    return {p: ordered[i % n] for i, p in enumerate(sorted(partitions))}


def partitions_of(partitions: Sequence[int], members: Sequence[Member], member: str) -> list[int]:
    return sorted(p for p, m in assign(partitions, members).items() if m.id == member)


def kind(members: Sequence[Member]) -> str | None:
    """'push', 'pull', or None for an empty group."""
    if not members:
        return None
    return "pull" if members[0].address is None else "push"
