"""The limits of a MessageID and of a queue, the same on both sides of the wire.

A message is addressed by (partition, timestamp ms, sequence); each is a non-negative
big-endian integer in the row key (int16, int64, int16: see ``gateway/rowkey.py``). The one
other spelling of each language: ``hqueue_limits.h`` beside this file for C (the gateway's
``_rowkey.h`` and the client's C codecs include it) and the consts of ``idl/hqueue.thrift`` for
the generated clients; ``tests/unit/test_limits.py`` checks both and fails on any other copy.
"""

MAX_PARTITIONS = 32767  # a queue has 1..32767 partitions
MAX_PARTITION_ID = MAX_PARTITIONS - 1  # so partition ids are 0..32766
MAX_SEQUENCE = 32767  # sequence ids are 0..32767 within one millisecond
MAX_TIMESTAMP = (1 << 63) - 1
