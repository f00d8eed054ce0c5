"""The pure-Python twins of the gateway's C fast paths (``HQUEUE_PUREPYTHON=1``).

Each function here (in a module named after its C original; ``common.py`` has what they
share) does what its C original does, byte for byte and result for result, in
plain Python: ``gateway/fast.py`` binds these instead of the C functions when the variable is
set, and the C extensions are then not imported at all. They are the readable spec of the C
code (tests/unit/test_purefast.py and test_purefast_store.py check them equal with
Hypothesis) and a way to run the gateway where nothing can be compiled; they are several
times slower.

Owners: the Thrift fast codec (``scan``, ``extract_put``, ``total_bytes``,
``encode_messages_reply``:
gateway/_wirecheck.c), the merged scans' merge (``merge_rows``: gateway/_merge.c), the embedded
store's log cells, row keys and sync thread (gateway/_wal.c) and its put records and their
scan loop (``wal_records``, ``scan_records``: gateway/_records.c; the marks of its encoded
pages, ``mark_message``: gateway/_marks.h), the HBase codec
(``encode_mutate_rows``, ``decode_rows_reply``: gateway/store/_hbasecodec.c).
"""

from .hbasecodec import decode_rows_reply, encode_mutate_rows
from .merge import merge_encoded, merge_rows
from .records import MARK, mark_message, scan_records, wal_records
from .wal import Syncer, consecutive_keys, put_wal_cells, wal_cells
from .wirecheck import encode_messages_reply, extract_put, tmessage, total_bytes
from .wirescan import scan

__all__ = [
    "MARK",
    "Syncer",
    "consecutive_keys",
    "decode_rows_reply",
    "encode_messages_reply",
    "encode_mutate_rows",
    "extract_put",
    "mark_message",
    "merge_encoded",
    "merge_rows",
    "put_wal_cells",
    "scan",
    "scan_records",
    "tmessage",
    "total_bytes",
    "wal_cells",
    "wal_records",
]
