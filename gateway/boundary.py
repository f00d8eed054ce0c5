"""The Thrift boundary: decode a request within limits, call the handler, map every failure.

thriftpy2's ``TProcessor.process`` drops the client's connection when a handler raises an
exception the IDL does not declare. Here every failure becomes an answer instead:
:class:`InvalidArgument` -> ``IllegalArgument``, other :class:`HQueueError` -> ``IOError``,
anything unexpected -> ``TApplicationException(INTERNAL_ERROR)`` (logged with its traceback).
The connection stays usable after any of them.

Decoding is bounded too: thriftpy2 enforces no limits, and a list of empty structs costs one
byte on the wire but a few hundred in Python. While a request is decoded, each struct the
decoder builds is charged to the connection's budget, and running out aborts the connection.
"""

from __future__ import annotations

import logging
from typing import Any

from gevent import getcurrent
from thriftpy2.thrift import TApplicationException, TProcessor
from thriftpy2.transport import TTransportException

from .errors import HQueueError, InvalidArgument

log = logging.getLogger(__name__)

_budgets: dict[Any, list[int]] = {}


class RequestTooLarge(TTransportException):
    pass


def _charge() -> None:
    budget = _budgets.get(getcurrent())
    if budget is not None:
        budget[0] -= 1
        if budget[0] < 0:
            raise RequestTooLarge(message="request holds too many structs")


def meter_structs(*classes: type) -> None:
    """Makes decoding of ``classes`` count against the current request's struct budget.

    Idempotent. Objects built outside a metered decode are not counted.
    """
    for cls in classes:
        if getattr(cls, "_hq_metered", False):
            continue
        original = cls.__init__  # type: ignore[misc]

        def init(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> None:
            if _budgets:
                _charge()
            _original(self, *args, **kwargs)

        cls.__init__ = init  # type: ignore[misc]
        cls._hq_metered = True  # type: ignore[attr-defined]


class GatewayProcessor(TProcessor):
    """A TProcessor that maps errors to the IDL and bounds what one request may decode."""

    def __init__(self, thrift: Any, service: Any, handler: Any, *, max_structs: int) -> None:
        super().__init__(service, handler)
        self.max_structs = max_structs
        self._io_error: Any = thrift.IOError
        self._illegal: Any = thrift.IllegalArgument

    def process(self, iprot: Any, oprot: Any) -> None:
        me = getcurrent()
        _budgets[me] = [self.max_structs]
        try:
            api, seqid, result, call = self.process_in(iprot)
        finally:
            _budgets.pop(me, None)
        if isinstance(result, TApplicationException):
            return self.send_exception(oprot, api, result, seqid)
        assert call is not None  # only unknown methods come without one
        try:
            result.success = call()
        except InvalidArgument as exc:
            result.ia = self._illegal(message=str(exc))
        except HQueueError as exc:
            result.io = self._io_error(message=str(exc))
        except TApplicationException as exc:
            return self.send_exception(oprot, api, exc, seqid)
        except Exception as exc:
            log.exception("unexpected error in %s", api)
            return self.send_exception(
                oprot,
                api,
                TApplicationException(
                    TApplicationException.INTERNAL_ERROR,
                    f"internal error in {api}: {type(exc).__name__}: {exc}",
                ),
                seqid,
            )
        if not result.oneway:
            self.send_result(oprot, api, result, seqid)
        return None
