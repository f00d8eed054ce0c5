"""The one door to the gateway's C fast paths, and to their pure-Python twins.

Every Python module of the gateway reaches a C function through here (``from ..fast import
merge_rows``), never by importing an extension module. With ``HQUEUE_PUREPYTHON=1`` (any value
but empty or ``0``) this binds the twins of ``gateway/purefast/`` instead and the C
extensions are not imported at all: a gateway that runs where nothing could be compiled, and
the unit tests run in both modes (scripts/test-all). The choice is made once, at import: the
names below are the C functions themselves (or the twins), so a call costs no extra hop.

Owners (one C module each, docs/ARCHITECTURE.md "Fast paths"):

- the Thrift fast codec, gateway/_wirecheck.c: ``scan`` (where a request ends, and whether it
  is sane), ``extract_put`` (a put's topics and values straight from the wire, as Spans),
  ``total_bytes`` (their bytes, with no object per message),
  ``encode_messages_reply`` (a scan's reply bytes);
- the merged scans' merge, gateway/_merge.c: ``merge_rows`` (rows), ``merge_encoded``
  (TMessages a store reader encoded);
- the embedded store, gateway/_wal.c: ``consecutive_keys`` (row keys), ``wal_cells``,
  ``put_wal_cells``, ``Syncer``; its put records, gateway/_records.c:
  ``wal_records`` (a put's records as log cells), ``scan_records`` (the scan loop over rows
  and records);
- the HBase store's codec, gateway/store/_hbasecodec.c: ``encode_mutate_rows``,
  ``decode_rows_reply``.
"""

from __future__ import annotations

import os

PURE_PYTHON = os.environ.get("HQUEUE_PUREPYTHON", "") not in ("", "0")

if not PURE_PYTHON:
    from ._merge import merge_encoded, merge_rows
    from ._records import scan_records, wal_records
    from ._wal import Syncer, consecutive_keys, put_wal_cells, wal_cells
    from ._wirecheck import encode_messages_reply, extract_put, scan, total_bytes
    from .store._hbasecodec import decode_rows_reply, encode_mutate_rows
else:  # the twins have the C functions' signatures (the stubs' types are the contract)
    from .purefast import (  # type: ignore[assignment]
        Syncer,
        consecutive_keys,
        decode_rows_reply,
        encode_messages_reply,
        encode_mutate_rows,
        extract_put,
        merge_encoded,
        merge_rows,
        put_wal_cells,
        scan,
        scan_records,
        total_bytes,
        wal_cells,
        wal_records,
    )

__all__ = [
    "PURE_PYTHON",
    "Syncer",
    "consecutive_keys",
    "decode_rows_reply",
    "encode_messages_reply",
    "encode_mutate_rows",
    "extract_put",
    "merge_encoded",
    "merge_rows",
    "put_wal_cells",
    "scan",
    "scan_records",
    "total_bytes",
    "wal_cells",
    "wal_records",
]
