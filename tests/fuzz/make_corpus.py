"""Writes the seed corpus of tests/fuzz (``python -m tests.fuzz.make_corpus``): one valid
request per interesting method and protocol, as a client library would send it. The fuzzer
mutates these; committed so a run starts from the same seeds everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hqueue.protocol import hqueue_thrift
from thriftpy2.protocol import TBinaryProtocol, TCompactProtocol
from thriftpy2.thrift import TMessageType
from thriftpy2.transport import TMemoryBuffer

CORPUS = Path(__file__).parent / "corpus"


def encode(compact: bool, method: str, **args: Any) -> bytes:
    buf = TMemoryBuffer()
    proto = TCompactProtocol(buf) if compact else TBinaryProtocol(buf)
    proto.write_message_begin(method, TMessageType.CALL, 7)
    getattr(hqueue_thrift().HQueueService, method + "_args")(**args).write(proto)
    proto.write_message_end()
    return bytes(buf.getvalue())


def seeds() -> dict[str, tuple[bool, bytes]]:
    t = hqueue_thrift()
    msgs = [t.TMessage(topic=b"t%d" % i, value=b"v" * i) for i in range(3)]
    scan = t.TMessageScan(
        startMessageID=t.TMessageID(1_700_000_000_000, 3),
        stopMessageID=t.TMessageID(1_800_000_000_000, 0),
        topics=[b"a", b"b"],
        reversed=False,
        caching=100,
    )
    sub = t.TSubscription(
        name=b"s",
        topics=[b"t"],
        partitions=[t.TSubscribedPartition(0, t.TMessageID(5, 1))],
    )
    calls: dict[str, dict[str, Any]] = {
        "putMessages": {"queueName": b"q", "tMessages": msgs},
        "putMessagesWithPid": {"queueName": b"q", "partitionID": 1, "tMessages": msgs},
        "putMessage": {"queueName": b"q", "tMessage": msgs[1]},
        "putMessageWithPid": {"queueName": b"q", "partitionID": 0, "tMessage": msgs[2]},
        "queueScannerOpen": {"queueName": b"q", "messageScan": scan},
        "combinedScannerOpen": {"queueName": b"q", "partitionIDs": [0, 2], "messageScan": scan},
        "messageScannerGetList": {"id": 12345, "nbMessages": 100},
        "createQueue": {
            "queueName": b"q",
            "partitionCount": 4,
            "ttlSeconds": 60,
            "config": {"hbase.hqueue.partitionsPerRegion": "2"},
        },
        "addSubscriber": {"queueName": b"q", "subscription": sub},
        "listQueues": {},
    }
    out = {}
    for method, args in calls.items():
        for compact in (False, True):
            name = f"{method}-{'compact' if compact else 'binary'}"
            out[name] = (compact, encode(compact, method, **args))
    return out


def main() -> None:
    CORPUS.mkdir(exist_ok=True)
    for name, (_, data) in seeds().items():
        (CORPUS / f"{name}.bin").write_bytes(data)


if __name__ == "__main__":
    main()
