"""What :meth:`hqueue.Queue.scan` returns, and the loop that reads a gateway-side scanner's
pages: straight into Messages on a socket of ours (:class:`hqueue.fastpath.PagedScan`, one
page ahead), else through thriftpy2."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from . import fastpath
from .errors import InvalidArgument, ServerError, TransportError
from .message import Message, MessageID

if TYPE_CHECKING:
    from .connection import Connection


def _message(m: Any) -> Message:
    mid = MessageID(m.id.timestamp, m.id.sequenceID) if m.id is not None else None
    return Message(topic=m.topic, value=m.value, partition=m.partitionID, id=mid)


class ScanIterator(itertools.chain[Message]):
    """What :meth:`Queue.scan` returns: its messages, page after page.

    An :func:`itertools.chain` of the pages a generator reads, so that stepping from one
    message to the next runs no Python code (a generator yielding each message cost about
    as much as decoding it). Dropping it, or :meth:`close`, ends the scan as closing a
    generator would: the gateway-side scanner is closed."""

    __slots__ = ("_pages",)
    _pages: Generator[list[Message], None, None]

    @classmethod
    def over(cls, pages: Generator[list[Message], None, None]) -> ScanIterator:
        it: ScanIterator = cls.from_iterable(pages)  # type: ignore[assignment]
        it._pages = pages
        return it

    def close(self) -> None:
        """Ends the scan now: closes the gateway-side scanner if it is still open (what is
        left of the page already read still comes out, then nothing)."""
        self._pages.close()


def read_pages(
    conn: Connection, opener: tuple[Any, ...], batch_size: int, limit: int | None
) -> Generator[list[Message], None, None]:
    """The pages of the scanner that ``opener`` (a ``*ScannerOpen`` call and its arguments)
    opens on ``conn``, up to ``limit`` messages; the scanner is closed when the generator
    ends or is closed."""
    if limit == 0:
        return
    sid = conn.call(*opener)
    ch = fastpath.channel(conn)
    if ch is not None:  # read straight into Messages, one page ahead
        paged = fastpath.PagedScan(conn, ch, sid, batch_size, limit)
        try:
            while page := paged.next():
                yield page
        finally:
            paged.close()
        return
    open_ = True
    count = 0
    try:
        while True:
            want = batch_size if limit is None else min(batch_size, limit - count)
            batch = [_message(m) for m in conn.call("messageScannerGetList", sid, want)]
            if not batch:
                open_ = False  # the empty list freed it
                return
            yield batch
            count += len(batch)
            if limit is not None and count >= limit:
                return
    except TransportError:
        open_ = False  # gone with the connection; the gateway expires it
        raise
    finally:
        if open_:
            with contextlib.suppress(InvalidArgument, ServerError, TransportError):
                conn.call("messageScannerClose", sid)
