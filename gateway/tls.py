"""TLS for every socket the gateway serves or opens, made from one configuration.

- Serving (``--tls-cert``/``--tls-key``): :func:`server_context`; with ``--tls-client-ca`` a
  client must present a certificate that CA signed (mutual TLS), and its subject's common
  name becomes the connection's identity (:func:`peer_identity`, see :mod:`gateway.auth`).
- Connecting out (push to subscribers, forwarding puts to other gateways): with ``--tls-ca``
  the gateway connects over TLS, verifies the peer against that CA and presents its own
  ``--tls-cert`` as a client certificate (so peers requiring mutual TLS accept it):
  :func:`client_context`. Forwarding code should call it rather than build contexts itself.

The handshake of an accepted connection runs in that connection's greenlet
(:func:`accept`), bounded by ``HANDSHAKE_TIMEOUT`` seconds, so a client that never completes
it costs one greenlet for that long and nothing else. Contexts come from the ``ssl`` module as
it is when called: gevent's, since the gateway monkey-patches first thing.
"""

from __future__ import annotations

import logging
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hqueue_contract import tls as hqueue_tls

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 10.0  # seconds


class TLSConfigError(ValueError):
    """A TLS option is wrong (a missing file, a key that does not match, ...)."""


@dataclass(frozen=True)
class TLSConfig:
    """Paths to PEM files; every field None means plain TCP everywhere."""

    cert: str | None = None  # the gateway's certificate chain (serving; client cert going out)
    key: str | None = None  # its private key (None: in the cert file)
    client_ca: str | None = None  # require client certificates signed by this CA
    ca: str | None = None  # verify peers the gateway connects to; set = connect with TLS

    @property
    def serving(self) -> bool:
        return self.cert is not None

    @property
    def mutual(self) -> bool:
        return self.client_ca is not None

    @property
    def connecting(self) -> bool:
        return self.ca is not None

    def check(self) -> None:
        """Raises TLSConfigError naming the flag when the files are unusable."""
        if self.key is not None and self.cert is None:
            raise TLSConfigError("--tls-key needs --tls-cert")
        if self.client_ca is not None and self.cert is None:
            raise TLSConfigError("--tls-client-ca needs --tls-cert (mutual TLS is TLS first)")
        for flag, path in (
            ("--tls-cert", self.cert),
            ("--tls-key", self.key),
            ("--tls-client-ca", self.client_ca),
            ("--tls-ca", self.ca),
        ):
            if path is not None and not Path(path).is_file():
                raise TLSConfigError(f"{flag}: no such file: {path}")
        if self.serving:
            server_context(self)
        if self.connecting:
            client_context(self)


def server_context(config: TLSConfig) -> ssl.SSLContext:
    assert config.cert is not None
    try:
        return hqueue_tls.server_context(config.cert, config.key, config.client_ca)
    except (ssl.SSLError, OSError) as exc:
        raise TLSConfigError(f"--tls-cert/--tls-key/--tls-client-ca: {exc}") from None


def client_context(config: TLSConfig) -> ssl.SSLContext | None:
    """The context for outgoing connections; None when ``--tls-ca`` is not set (plain TCP)."""
    if config.ca is None:
        return None
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=config.ca)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if config.cert is not None:
            ctx.load_cert_chain(config.cert, config.key)
    except (ssl.SSLError, OSError) as exc:
        raise TLSConfigError(f"--tls-ca/--tls-cert/--tls-key: {exc}") from None
    return ctx


def accept(sock: socket.socket, context: ssl.SSLContext) -> ssl.SSLSocket:
    """Server side of the handshake on an accepted socket; raises OSError/ssl.SSLError."""
    tls = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
    tls.settimeout(HANDSHAKE_TIMEOUT)
    tls.do_handshake()
    tls.settimeout(None)
    return tls


def peer_identity(sock: Any) -> str | None:
    """The common name of the verified client certificate of a TLS socket, else None."""
    getpeercert = getattr(sock, "getpeercert", None)
    if getpeercert is None:
        return None
    try:
        cert = getpeercert()
    except (ValueError, OSError):
        return None
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def shutdown_read(sock: socket.socket) -> None:
    """Stops reading from a (TLS or plain) connection and lets replies still be written.

    ``SSLSocket.shutdown`` drops the TLS layer first (a reply written after it would go out in
    the clear and break the client), so a TLS socket is shut down at the TCP level only.
    """
    if hasattr(sock, "getpeercert"):  # gevent's or the standard library's SSLSocket
        plain: Any = type(sock).__mro__[1]  # the plain socket class
        plain.shutdown(sock, socket.SHUT_RD)
    else:
        sock.shutdown(socket.SHUT_RD)
