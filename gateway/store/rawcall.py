"""Send bytes we encoded ourselves on a happybase/thriftpy2 connection, and read one reply.

The HBase store writes its hot calls (``mutateRows``, ``scannerGetList``) with the fast codec
(gateway/store/_hbasecodec.c) instead of building thriftpy2 objects. That needs three private
attributes of thriftpy2's client, and only this module touches them: ``client._oprot.trans``
(the buffered transport the request is written to), its ``sock`` (read directly for a raw
reply: the buffered transport has read nothing since its last reply), and ``client._recv``
(thriftpy2's own reply decoder). A thriftpy2 upgrade that renames them breaks here, and
the HBase store contract tests (tests/contract) and tests/integration/test_hbase_store.py
say so.
"""

from __future__ import annotations

from typing import Any

from ..fast import scan as scan_message

# Sanity bounds for replies read off the wire (HBase is trusted; these only stop garbage).
REPLY_LIMITS = (1 << 30, 1 << 26, 1 << 28)


def call(client: Any, request: bytes, method: str) -> Any:
    """Sends ``request`` (a whole binary-protocol call of ``method``) and lets thriftpy2
    decode the reply: its result, or its exception raised."""
    trans = client._oprot.trans
    trans.write(request)
    trans.flush()
    return client._recv(method)


def call_raw(client: Any, request: bytes) -> bytearray:
    """Sends ``request`` and returns the one whole reply message, undecoded (checked by
    the request scanner, gateway.fast.scan, as it arrives)."""
    trans = client._oprot.trans
    trans.write(request)
    trans.flush()
    sock = trans.sock  # the buffered transport has read nothing since its last reply
    data = bytearray()
    state = None
    while True:
        chunk = sock.recv(1 << 18)
        if not chunk:
            raise OSError("HBase's Thrift server closed the connection")
        data += chunk
        status, end, state, _ = scan_message(data, False, state, *REPLY_LIMITS)
        if status == 0:
            break
    if end != len(data):
        raise OSError("HBase's Thrift server sent more than one reply")
    return data
