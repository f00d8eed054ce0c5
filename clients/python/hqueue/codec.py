"""The client's put encoder and scan decoder: C (``hqueue._fastclient``) when it is built,
else its pure-Python twin (``hqueue._purecodec``); ``HQUEUE_PUREPYTHON=1`` forces the twin.

Both write exactly the bytes thriftpy2 writes for the same call (binary protocol) and read
scan replies straight into :class:`hqueue.Message` named tuples::

    encode_put(seqid, queue, partition, messages, base_index) -> bytes
    encode_put_lists(seqid, queue, partition, topics, values, base_index) -> bytes
    decode_list_reply(buffer) -> (end, [Message]) | 0 (incomplete) | -1 (anything else)
    message_end(buffer) -> end | 0 (incomplete)

``partition`` is -1 for ``putMessages`` (each message's own partition, else a random one),
else ``putMessagesWithPid``; ``base_index`` numbers the messages in error messages
(``messages[1003].topic``) when a long put is sent in several calls.
"""

from __future__ import annotations

import importlib
import os
import struct
from types import ModuleType

from .errors import InvalidArgument
from .message import Message, MessageID


def _load() -> tuple[ModuleType, bool]:
    if os.environ.get("HQUEUE_PUREPYTHON", "") not in ("", "0"):
        return importlib.import_module("hqueue._purecodec"), False
    try:
        return importlib.import_module("hqueue._fastclient"), True
    except ImportError:  # not built (no compiler at install time): the twin does it all
        return importlib.import_module("hqueue._purecodec"), False


impl, NATIVE = _load()
impl.setup(Message, MessageID, InvalidArgument)

encode_put = impl.encode_put
encode_put_lists = impl.encode_put_lists
decode_list_reply = impl.decode_list_reply
message_end = impl.message_end

_GET_LIST_HEAD = struct.pack(">iI", -0x7FFEFFFF, 21) + b"messageScannerGetList"
_GET_LIST_ARGS = struct.Struct(">ibhibhib")


def encode_get_list(seqid: int, scanner_id: int, count: int) -> bytes:
    """The CALL of ``messageScannerGetList(id, nbMessages)``: small, so struct suffices."""
    return _GET_LIST_HEAD + _GET_LIST_ARGS.pack(seqid, 8, 1, scanner_id, 8, 2, count, 0)
