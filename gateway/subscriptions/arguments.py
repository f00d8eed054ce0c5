"""The arguments of the subscription methods: their limits, and the checks that name the
argument in every error (gateway.subscriptions.service calls them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hqueue_contract import registry as layout

from ..errors import InvalidArgument

MIN_LEASE_SECONDS = 1
MAX_LEASE_SECONDS = 3600
MAX_ATTEMPTS = 1000
MAX_BACKOFF_MS = 3_600_000
MAX_BATCH_MESSAGES = 100_000
MAX_PULL_MESSAGES = 100_000
MAX_WAIT_MS = 300_000


@dataclass(frozen=True)
class SubscriptionOptions:
    retry: layout.RetryPolicy
    max_batch: int | None
    shared: bool


def subscription_options(raw: Any) -> SubscriptionOptions:
    """retryPolicy, maxBatchMessages and shared of a TSubscription, checked."""
    default = layout.RetryPolicy()
    policy = getattr(raw, "retryPolicy", None)
    retry = default
    if policy is not None:

        def field(value: Any, fallback: int, argument: str, low: int, high: int) -> int:
            if value is None:
                return fallback
            if not isinstance(value, int) or not low <= value <= high:
                raise InvalidArgument(
                    f"subscription.retryPolicy.{argument}", f"must be {low}..{high}, got {value!r}"
                )
            return int(value)

        attempts = field(policy.maxAttempts, default.max_attempts, "maxAttempts", 0, MAX_ATTEMPTS)
        first = field(
            policy.firstBackoffMs, default.first_backoff_ms, "firstBackoffMs", 1, MAX_BACKOFF_MS
        )
        most = field(
            policy.maxBackoffMs, max(first, default.max_backoff_ms), "maxBackoffMs", first,
            MAX_BACKOFF_MS,
        )  # fmt: skip
        retry = layout.RetryPolicy(attempts, first, most)
    max_batch = getattr(raw, "maxBatchMessages", None)
    if max_batch is not None and (
        not isinstance(max_batch, int) or not 1 <= max_batch <= MAX_BATCH_MESSAGES
    ):
        raise InvalidArgument(
            "subscription.maxBatchMessages", f"must be 1..{MAX_BATCH_MESSAGES}, got {max_batch!r}"
        )
    shared = bool(getattr(raw, "shared", None))
    return SubscriptionOptions(retry, max_batch, shared)


def lease_seconds(raw: Any) -> int:
    if not isinstance(raw, int) or not MIN_LEASE_SECONDS <= raw <= MAX_LEASE_SECONDS:
        raise InvalidArgument(
            "leaseSeconds",
            f"must be {MIN_LEASE_SECONDS}..{MAX_LEASE_SECONDS} seconds, got {raw!r}",
        )
    return raw


def int_in(raw: Any, argument: str, low: int, high: int) -> int:
    if not isinstance(raw, int) or isinstance(raw, bool) or not low <= raw <= high:
        raise InvalidArgument(argument, f"must be {low}..{high}, got {raw!r}")
    return raw


def text(raw: Any, argument: str) -> str:
    if isinstance(raw, bytes):
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise InvalidArgument(argument, "must be UTF-8") from None
    if isinstance(raw, str):
        return raw
    raise InvalidArgument(argument, "must be set")


def name(raw: Any, argument: str) -> str:
    value = text(raw, argument)
    try:
        return layout.check_name(value, argument)
    except ValueError as exc:
        raise InvalidArgument(argument, str(exc)) from None
