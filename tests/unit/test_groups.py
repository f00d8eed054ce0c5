"""Consumer-group assignment and member leases (gateway.subscriptions.groups / registry)."""

from __future__ import annotations

from gateway.subscriptions import groups
from gateway.subscriptions.registry import LeaseTable, Member


def member(i: str, address: str | None = None) -> Member:
    return Member(i, address, None, "1")


def test_assignment_is_even_deterministic_and_total() -> None:
    parts = list(range(10))
    ms = [member("c"), member("a"), member("b")]
    got = groups.assign(parts, ms)
    assert set(got) == set(parts)
    counts = sorted(sum(1 for m in got.values() if m.id == x) for x in "abc")
    assert counts == [3, 3, 4]
    assert got == groups.assign(list(reversed(parts)), list(reversed(ms)))  # order-free
    assert groups.partitions_of(parts, ms, "a") == [0, 3, 6, 9]
    assert groups.assign(parts, []) == {}
    assert groups.kind([member("x", "h:1")]) == "push" and groups.kind([member("x")]) == "pull"


def test_member_leases_renew_release_and_expire() -> None:
    expired: list[tuple[str, str, str, str | None]] = []
    table = LeaseTable(lambda q, n, inc, m=None: expired.append((q, n, inc, m)))
    plain = table.grant("q", "s", "i0", 10)
    a = table.grant("q", "g", "i1", 10, member="a")
    b = table.grant("q", "g", "i2", 10, member="b")
    assert len({plain, a, b}) == 3
    assert table.renew("q", "g", b) and table.renew("q", "s", plain)
    assert not table.renew("q", "g", plain)
    assert table.renew_member("q", "g", "a") and not table.renew_member("q", "g", "c")
    gone = table.release("q", "g", a)
    assert gone is not None and gone.member == "a"
    assert not table.renew("q", "g", a)
    assert table.release("q", "g", None) is not None  # every lease of the subscriber
    assert not table.renew("q", "g", b)
