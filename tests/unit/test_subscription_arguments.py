"""The subscription methods' argument checks (gateway.subscriptions.arguments): every error
names the argument, and good values come back as given."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hqueue_contract.registry import RetryPolicy

from gateway.errors import InvalidArgument
from gateway.subscriptions import arguments as args


def _policy(**fields: object) -> SimpleNamespace:
    return SimpleNamespace(
        **{"maxAttempts": None, "firstBackoffMs": None, "maxBackoffMs": None, **fields}
    )


def test_no_policy_means_the_defaults_and_no_batch_cap() -> None:
    opts = args.subscription_options(SimpleNamespace())
    assert opts == args.SubscriptionOptions(RetryPolicy(), None, False)


def test_a_policy_keeps_what_it_sets_and_defaults_the_rest() -> None:
    raw = SimpleNamespace(retryPolicy=_policy(maxAttempts=3), maxBatchMessages=50, shared=True)
    opts = args.subscription_options(raw)
    default = RetryPolicy()
    assert opts.retry == RetryPolicy(3, default.first_backoff_ms, default.max_backoff_ms)
    assert (opts.max_batch, opts.shared) == (50, True)


def test_max_backoff_below_the_first_backoff_is_refused() -> None:
    raw = SimpleNamespace(retryPolicy=_policy(firstBackoffMs=500, maxBackoffMs=100))
    with pytest.raises(InvalidArgument, match=r"retryPolicy\.maxBackoffMs.*500\.\.3600000"):
        args.subscription_options(raw)


@pytest.mark.parametrize(
    ("raw", "argument"),
    [
        (SimpleNamespace(retryPolicy=_policy(maxAttempts=-1)), "retryPolicy.maxAttempts"),
        (SimpleNamespace(retryPolicy=_policy(maxAttempts=1001)), "retryPolicy.maxAttempts"),
        (SimpleNamespace(retryPolicy=_policy(firstBackoffMs=0)), "retryPolicy.firstBackoffMs"),
        (SimpleNamespace(retryPolicy=_policy(maxBackoffMs="1")), "retryPolicy.maxBackoffMs"),
        (SimpleNamespace(maxBatchMessages=0), "maxBatchMessages"),
        (SimpleNamespace(maxBatchMessages=100_001), "maxBatchMessages"),
    ],
)
def test_a_bad_option_names_its_field(raw: SimpleNamespace, argument: str) -> None:
    with pytest.raises(InvalidArgument, match=argument.replace(".", r"\.")):
        args.subscription_options(raw)


@pytest.mark.parametrize("raw", [0, 3601, None, "30", 2.5])
def test_lease_seconds_out_of_range_or_not_an_int(raw: object) -> None:
    with pytest.raises(InvalidArgument, match=r"leaseSeconds.*1\.\.3600 seconds"):
        args.lease_seconds(raw)


def test_lease_seconds_in_range_come_back() -> None:
    assert [args.lease_seconds(n) for n in (1, 30, 3600)] == [1, 30, 3600]


@pytest.mark.parametrize("raw", [True, -1, 11, None, "5"])
def test_int_in_refuses_bools_and_values_out_of_range(raw: object) -> None:
    with pytest.raises(InvalidArgument, match=r"maxMessages.*1\.\.10"):
        args.int_in(raw, "maxMessages", 1, 10)


def test_text_decodes_utf8_bytes_and_refuses_the_rest() -> None:
    assert args.text(b"gw:1", "address") == "gw:1"
    assert args.text("gw:1", "address") == "gw:1"
    with pytest.raises(InvalidArgument, match=r"address.*UTF-8"):
        args.text(b"\xff", "address")
    with pytest.raises(InvalidArgument, match=r"address.*must be set"):
        args.text(None, "address")


@pytest.mark.parametrize("raw", ["", "a/b", "..", " padded", "x" * 201])
def test_a_bad_subscriber_name_names_the_argument(raw: str) -> None:
    with pytest.raises(InvalidArgument, match="memberID"):
        args.name(raw, "memberID")


def test_a_good_subscriber_name_comes_back() -> None:
    assert args.name(b"billing-workers", "subscriberName") == "billing-workers"
