"""One root exception for the gateway; the Thrift boundary maps it to the IDL's exceptions."""

from __future__ import annotations


class HQueueError(Exception):
    """Root of every error the gateway raises on purpose."""


class InvalidArgument(HQueueError):
    """The caller's fault. The message names the argument and says what is wrong.

    Becomes the IDL's ``IllegalArgument``.
    """

    def __init__(self, argument: str, problem: str) -> None:
        super().__init__(f"{argument}: {problem}")
        self.argument = argument


class StoreError(HQueueError):
    """Ours or the store's fault; retrying later may succeed. Becomes the IDL's ``IOError``."""


class Overloaded(StoreError):
    """A bounded resource is full (open scanners, pending writes)."""
