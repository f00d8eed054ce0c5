"""The server-side TLS context, the same for the gateway (``--tls-cert``) and a subscriber's
own service (``hqueue-subscriber --tls-cert``).

Built with the ``ssl`` module as it is when called: under gevent (monkey-patched first, as
every hqueue process does) that is gevent's cooperative ``ssl``.
"""

from __future__ import annotations

import ssl


def server_context(
    cert: str, key: str | None = None, client_ca: str | None = None
) -> ssl.SSLContext:
    """A server-side context presenting ``cert``; with ``client_ca`` a peer must present a
    certificate that CA signed (mutual TLS). Raises ``ssl.SSLError``/``OSError``."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    if client_ca is not None:
        ctx.load_verify_locations(cafile=client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx
