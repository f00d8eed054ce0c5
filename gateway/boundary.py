"""The Thrift boundary: decode a request within limits, call the handler, map every failure.

thriftpy2's ``TProcessor.process`` drops the client's connection when a handler raises an
exception the IDL does not declare. Here every failure becomes an answer instead:
:class:`InvalidArgument` -> ``IllegalArgument``, other :class:`HQueueError` -> ``IOError``,
anything unexpected -> ``TApplicationException(INTERNAL_ERROR)`` (logged with its traceback).
The connection stays usable after any of them.

The request was checked by :mod:`gateway.wire` before it reached ``process``.
"""

from __future__ import annotations

import logging
from typing import Any

from thriftpy2.thrift import TApplicationException, TProcessor

from .errors import HQueueError, InvalidArgument

log = logging.getLogger(__name__)


class GatewayProcessor(TProcessor):
    """A TProcessor that maps errors to the IDL and bounds what one request may decode."""

    def __init__(self, thrift: Any, service: Any, handler: Any) -> None:
        super().__init__(service, handler)
        self._io_error: Any = thrift.IOError
        self._illegal: Any = thrift.IllegalArgument

    def process(self, iprot: Any, oprot: Any) -> None:
        api, seqid, result, call = self.process_in(iprot)
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
