"""The exceptions of the Python client, and how gateway and transport failures map onto them.

One root, :class:`HQueueError`; below it the three kinds of failure a caller handles
differently:

- :class:`InvalidArgument` (also a ``ValueError``): the caller's mistake; ``argument`` names it.
- :class:`ServerError`: the gateway's or the store's fault; retrying later may succeed.
- :class:`TransportError` (also a ``ConnectionError``): the connection broke or timed out; it
  is closed, and the next call opens a new one.
"""

from __future__ import annotations


class HQueueError(Exception):
    """Root of every error the hqueue client raises."""


class InvalidArgument(HQueueError, ValueError):
    """An argument the gateway (or the client, before sending) refused.

    ``argument`` is its name as the gateway's IDL spells it (``queueName``,
    ``tMessages[3].topic``) or, for checks made here, the Python parameter (``batch_size``).
    """

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(f"{argument}: {message}" if argument else message)
        self.argument = argument
        self.message = message

    @classmethod
    def from_gateway(cls, text: str) -> InvalidArgument:
        """From an ``IllegalArgument`` message, which reads ``argument: what is wrong``."""
        argument, sep, rest = (text or "").partition(": ")
        if not sep or " " in argument:
            return cls("", text or "illegal argument")
        return cls(argument, rest)


class ServerError(HQueueError):
    """The gateway answered with ``IOError`` (its own or the store's failure) or a
    ``TApplicationException`` (an unknown method, an internal error). The connection is still
    usable."""


class TransportError(HQueueError, ConnectionError):
    """No answer: the gateway is unreachable, the connection broke, timed out, or speaks
    another transport/protocol (``framed``/``compact`` must match the gateway's flags)."""


class PoolTimeout(HQueueError, TimeoutError):
    """No pooled connection became free within the timeout."""
