"""TLS for connections to a gateway (and, in the gateway, to subscribers and other gateways).

    conn = hqueue.Connection("gw.example", 9190, tls=hqueue.TLS(ca="ca.pem"))
    conn = hqueue.Connection(..., tls=hqueue.TLS(ca="ca.pem", cert="me.pem", key="me.key"))

``ca`` verifies the gateway's certificate (None: the system's trusted CAs); ``cert``/``key``
present a client certificate, which a gateway started with ``--tls-client-ca`` requires (its
common name is the identity ``--admin-identities`` lists). The gateway's certificate must name
the host connected to (a DNS or IP subject alternative name), unless ``check_hostname=False``.

Contexts are built with the ``ssl`` module as it is when called: under gevent (monkey-patched
first, as every hqueue process does) that is gevent's cooperative ``ssl``.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from hqueue_contract.tls import server_context

from .errors import InvalidArgument

__all__ = ["TLS", "TLSOption", "client_context", "server_context"]


@dataclass(frozen=True)
class TLS:
    """How to speak TLS to a peer; paths to PEM files."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    check_hostname: bool = True

    def __post_init__(self) -> None:
        if self.key is not None and self.cert is None:
            raise InvalidArgument("tls.key", "given without tls.cert")
        for argument, path in (("tls.ca", self.ca), ("tls.cert", self.cert), ("tls.key", self.key)):
            if path is not None and not Path(path).is_file():
                raise InvalidArgument(argument, f"no such file: {path}")

    def context(self) -> ssl.SSLContext:
        """A client-side context: verifies the peer, presents ``cert`` when given."""
        try:
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.check_hostname = self.check_hostname
            if self.cert is not None:
                ctx.load_cert_chain(self.cert, self.key)
        except (ssl.SSLError, OSError) as exc:
            raise InvalidArgument("tls", f"cannot load the TLS files: {exc}") from None
        return ctx


TLSOption = TLS | ssl.SSLContext | bool | None


def client_context(tls: TLSOption) -> ssl.SSLContext | None:
    """None for plain TCP; a context for ``True`` (system CAs), a :class:`TLS` or a context."""
    if tls is None or tls is False:
        return None
    if tls is True:
        return TLS().context()
    if isinstance(tls, TLS):
        return tls.context()
    if isinstance(tls, ssl.SSLContext):
        return tls
    raise InvalidArgument("tls", f"must be a hqueue.TLS, an ssl.SSLContext or a bool, got {tls!r}")
