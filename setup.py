"""Only the C extensions live here; everything else is in pyproject.toml."""

from setuptools import Extension, setup

# The contract's limits in C, included by the gateway's row key and the client's codecs.
LIMITS_H = "clients/python/hqueue_contract/hqueue_limits.h"

setup(
    ext_modules=[
        # the gateway's C fast paths, one module per owner; each has a pure-Python twin that
        # gateway/fast.py picks instead with HQUEUE_PUREPYTHON=1 (docs/ARCHITECTURE.md)
        # the Thrift fast codec: request scanner, put extraction, scan reply encoding
        # (and Spans, gateway/_spans.h: a put's values as slices of its request)
        Extension(
            "gateway._wirecheck",
            ["gateway/_wirecheck.c", "gateway/_spans.c"],
            depends=["gateway/_thriftbuf.h", "gateway/_spans.h"],
            extra_compile_args=["-O2"],
        ),
        # the embedded store: its log cells, fdatasync thread, row keys, scan loop
        Extension(
            "gateway._wal",
            ["gateway/_wal.c"],
            depends=["gateway/_rowkey.h", LIMITS_H],
            extra_compile_args=["-O2"],
        ),
        # the embedded store's put records: a put's messages as one entry, and their scan loop
        Extension(
            "gateway._records",
            ["gateway/_records.c"],
            depends=[
                "gateway/_rowkey.h",
                "gateway/_thriftbuf.h",
                "gateway/_spans.h",
                "gateway/_marks.h",
            ],
            extra_compile_args=["-O2"],
        ),
        # the merged scans' k-way merge (gateway/scanners.py)
        Extension(
            "gateway._merge",
            ["gateway/_merge.c"],
            depends=["gateway/_rowkey.h", LIMITS_H, "gateway/_marks.h"],
            extra_compile_args=["-O2"],
        ),
        # the HBase store's Thrift1 codec (mutateRows calls, scannerGetList replies)
        Extension(
            "gateway.store._hbasecodec",
            ["gateway/store/_hbasecodec.c"],
            depends=["gateway/_rowkey.h", LIMITS_H, "gateway/_thriftbuf.h", "gateway/_spans.h"],
            extra_compile_args=["-O2"],
        ),
        # the Python client's put encoder and scan decoder (hqueue/_purecodec.py is its twin)
        Extension(
            "hqueue._fastclient",
            ["clients/python/hqueue/_fastclient.c"],
            depends=[LIMITS_H],
            extra_compile_args=["-O2"],
            optional=True,  # without a compiler the client still works, in pure Python
        ),
        # `hqueue import`'s common JSON Lines shape to put requests (its twin:
        # hqueue/toolkit/_purejsonl.py)
        Extension(
            "hqueue.toolkit._fastjsonl",
            ["clients/python/hqueue/toolkit/_fastjsonl.c"],
            depends=[LIMITS_H],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
