"""Who may administer through the console: the one hook the TLS and admin-identity work
(issue 15, section 4) fills in.

:func:`authorize` is called with the WSGI environ of every request that changes something
(create, truncate, disable, enable, delete a queue) and returns the identity the change is
logged under, or raises :class:`NotAllowed` (the console answers 403 with its message). It
should ask what the Thrift side asks (``--admin-identities`` / ``--admin-token-file``).

Until then everyone who can reach ``--console-port`` may administer, as everyone who can
reach the Thrift port may: keep the console on 127.0.0.1 or behind a proxy that checks.
"""

from __future__ import annotations

from typing import Any


class NotAllowed(Exception):
    """The request's sender may not administer; the message says why."""


def authorize(environ: dict[str, Any]) -> str:
    """The identity allowed to administer, or raises :class:`NotAllowed`."""
    return "anonymous@" + str(environ.get("REMOTE_ADDR", "?"))
