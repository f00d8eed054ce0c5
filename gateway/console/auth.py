"""Who may administer through the console: the one hook the TLS and admin-identity work
(issue 15, section 4) fills in.

:func:`authorize` is called with the WSGI environ of every request that changes something
(create, truncate, disable, enable, delete a queue) and returns the identity the change is
logged under, or raises :class:`NotAllowed` (the console answers 403 with its message). It
should ask what the Thrift side asks (``--admin-identities`` / ``--admin-token-file``).

:func:`policy_authorize` makes the hook from the gateway's
:class:`gateway.auth.AdminPolicy`: with ``--admin-token-file`` a change needs one of those
tokens (``Authorization: Bearer TOKEN`` on the API, the form's "Admin token" field in the
pages); ``--admin-identities`` alone cannot be checked over the console's plain HTTP, so it
refuses every change there. Without either flag everyone who can reach ``--console-port`` may
administer, as everyone who can reach the Thrift port may: keep the console on 127.0.0.1 or
behind a proxy that checks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..auth import AdminPolicy

log = logging.getLogger(__name__)


class NotAllowed(Exception):
    """The request's sender may not administer; the message says why."""


def authorize(environ: dict[str, Any]) -> str:
    """The identity allowed to administer, or raises :class:`NotAllowed`."""
    return "anonymous@" + str(environ.get("REMOTE_ADDR", "?"))


def policy_authorize(policy: AdminPolicy) -> Callable[[dict[str, Any]], str]:
    """The hook that asks what the Thrift side asks (see the module's docstring)."""

    def check(environ: dict[str, Any]) -> str:
        who = "console client at " + str(environ.get("REMOTE_ADDR", "?"))
        if not policy.restricted:
            return who
        if not policy.tokens:
            raise NotAllowed(
                "administrators are identified by TLS client certificates "
                "(--admin-identities), which the console cannot check: use the hqueue toolkit"
            )
        from flask import request  # called inside a request: its form is parsed on demand

        header = str(environ.get("HTTP_AUTHORIZATION", ""))
        token = header[7:].strip() if header[:7].lower() == "bearer " else None
        token = token or request.form.get("admin_token") or None
        if policy.token_valid(token):
            return who + " (admin token)"
        log.warning("console: refused a change from %s: no valid admin token", who)
        raise NotAllowed(
            "an admin token is needed: the page's 'Admin token' field, or "
            "'Authorization: Bearer TOKEN' on the API"
        )

    return check
