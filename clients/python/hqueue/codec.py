"""The client's put encoder and scan decoder: C (``hqueue._fastclient``) when it is built,
else its pure-Python twin (``hqueue._purecodec``); ``HQUEUE_PUREPYTHON=1`` forces the twin.

Both write exactly the bytes thriftpy2 writes for the same call (binary protocol) and read
scan replies straight into :class:`hqueue.Message` objects::

    encode_put(seqid, queue, partition, messages, base_index) -> bytes
    encode_put_lists(seqid, queue, partition, topics, values, base_index) -> bytes
    decode_list_reply(buffer) -> (end, [Message]) | 0 (incomplete) | -1 (anything else)
    message_end(buffer) -> end | 0 (incomplete)
    join_puts([request, ...]) -> request  (put CALLs of one queue and partition as one)

``partition`` is -1 for ``putMessages`` (each message's own partition, else a random one),
else ``putMessagesWithPid``; ``base_index`` numbers the messages in error messages
(``messages[1003].topic``) when a long put is sent in several calls.
"""

from __future__ import annotations

import importlib
import struct
from types import ModuleType

from .errors import InvalidArgument
from .message import NATIVE_CODEC, Message, MessageID

# the choice hqueue.message made for Message; the twin is imported only when it is used
impl: ModuleType = NATIVE_CODEC or importlib.import_module("hqueue._purecodec")
NATIVE = NATIVE_CODEC is not None
# the C codec also gives MessageID a dealloc of its own (see plain_dealloc)
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


_I32 = struct.Struct(">i")


def _put_list_at(request: bytes) -> tuple[int, int]:
    """Where the messages of an encoded put CALL begin, and how many there are."""
    (name_len,) = _I32.unpack_from(request, 4)
    at = 12 + name_len  # version, name, seqid
    if request[at : at + 3] != b"\x0b\x00\x01":
        raise ValueError("not a put CALL: no queueName first")
    at += 7 + _I32.unpack_from(request, at + 3)[0]
    if request[at] == 6:  # putMessagesWithPid's partitionID
        at += 5
    if request[at] != 15 or request[at + 3] != 12 or request[-1] != 0:
        raise ValueError("not a put CALL: no list of messages")
    return at + 8, _I32.unpack_from(request, at + 4)[0]


def join_puts(requests: list[bytes]) -> bytes:
    """One put CALL of the messages of ``requests`` (put CALLs of one method, queue and
    partition, as encode_put writes them), in order: the list's elements are copied as they
    are, behind the first request's head with the count of all."""
    if len(requests) == 1:
        return requests[0]
    first = requests[0]
    head, total = _put_list_at(first)
    parts: list[bytes | memoryview] = [b"", memoryview(first)[head:-1]]
    for request in requests[1:]:
        at, count = _put_list_at(request)
        if at != head or request[: head - 4] != first[: head - 4]:
            raise ValueError("the requests put to different queues or partitions")
        total += count
        parts.append(memoryview(request)[at:-1])
    parts[0] = first[: head - 4] + _I32.pack(total)
    parts.append(b"\x00")
    return b"".join(parts)
