"""Only the C extensions live here; everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("gateway._wirecheck", ["gateway/_wirecheck.c"], extra_compile_args=["-O2"]),
        Extension("gateway._wal", ["gateway/_wal.c"], extra_compile_args=["-O2"]),
        # the Python client's put encoder and scan decoder (hqueue/_purecodec.py is its twin)
        Extension(
            "hqueue._fastclient",
            ["clients/python/hqueue/_fastclient.c"],
            extra_compile_args=["-O2"],
            optional=True,  # without a compiler the client still works, in pure Python
        ),
    ]
)
