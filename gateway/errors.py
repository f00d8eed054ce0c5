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


class Unwritten(StoreError):
    """A put refused before any of it was written, so sending it again cannot duplicate it:
    the gateway that got it does not own its partition, or the owner it was forwarded to
    could not be reached (the connection was refused before the put was sent)."""


class NotOwner(Unwritten):
    """This gateway does not own the put's partition. Across the wire it is an IOError whose
    message starts with ``MARK``: that is how the gateway that forwarded the put tells it from
    the IOErrors after which some of the put may have been written."""

    MARK = "this gateway does not own partition"


class Overloaded(StoreError):
    """A bounded resource is full (open scanners, pending writes)."""
