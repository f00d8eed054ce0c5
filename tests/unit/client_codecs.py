"""The client's two put encoders and scan decoders (hqueue/_fastclient.c and its twin
hqueue/_purecodec.py), set up as hqueue.codec sets up the one it chose: for tests that check
both."""

from __future__ import annotations

from hqueue import (  # type: ignore[attr-defined]
    InvalidArgument,
    Message,
    MessageID,
    _fastclient,
    _purecodec,
)

IMPLS = [_fastclient, _purecodec]
for _impl in IMPLS:
    _impl.setup(Message, MessageID, InvalidArgument)
