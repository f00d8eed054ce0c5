"""Who may administer: the admin policy shared by the Thrift service and the web console.

Administrative actions (:data:`ADMIN_ACTIONS`: creating, deleting, truncating, disabling and
enabling queues, deleting subscribers, resetting a subscriber to a time or replaying its dead
letters, rebalancing the cluster) are refused to anyone the policy does not know as an
administrator. Two ways to be one, either suffices:

- ``--admin-identities CN,...`` with mutual TLS (``--tls-client-ca``): the common name of the
  client certificate the connection presented;
- ``--admin-token-file PATH``: a secret token (one per line in the file; blank lines and lines
  starting with ``#`` ignored), presented once per connection with the ``authenticate(token)``
  call (appended to ``idl/hqueue.thrift``), which marks that connection. Thrift has no
  per-call headers outside THeader, which the seed's clients (and the C++/PHP/Java examples)
  do not speak; a call that marks the connection works in every generated client unchanged.
  Tokens cross the network as they are: use them over TLS (``--tls-cert``).

With neither flag every caller may administer (as before). A refusal is
``InvalidArgument('identity', '... is not allowed to deleteQueue ...')`` (the IDL's
``IllegalArgument``) and is logged at WARNING with the caller's identity and address.

API for other front ends (the web console)::

    policy = AdminPolicy.from_options(identities="alice,ops", token_file="/etc/hq/tokens")
    policy.check(Principal(token=policy.token_valid(request_token), peer="10.0.0.5:51234"),
                 "truncateQueue")          # None, or raises InvalidArgument
    policy.check("the-token", "deleteQueue")  # a str/bytes is taken as a presented token

In the Thrift service the principal of the current connection is :func:`current_principal`
(set by the server per connection greenlet, updated by ``authenticate``).
"""

from __future__ import annotations

import contextvars
import hmac
import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .errors import InvalidArgument

log = logging.getLogger(__name__)

# resetSubscriber and replayDeadLetters move a subscriber's checkpoints (it gets messages again,
# or skips them): offset resets are administrative in RocketMQ and Kafka too
ADMIN_ACTIONS = frozenset(
    ["createQueue", "deleteQueue", "truncateQueue", "disableQueue", "enableQueue",
     "deleteSubscriber", "resetSubscriber", "replayDeadLetters", "balanceCluster"]
)  # fmt: skip


@dataclass(frozen=True)
class Principal:
    """Who is calling: the certificate's common name (mutual TLS), whether a valid admin
    token was presented, and the peer address (for logs only)."""

    common_name: str | None = None
    token: bool = False
    peer: str = ""

    def __str__(self) -> str:
        who = f"CN={self.common_name}" if self.common_name else "an anonymous client"
        if self.token:
            who += " (admin token)"
        return f"{who} at {self.peer}" if self.peer else who


ANONYMOUS = Principal()
# one context per connection greenlet (greenlets do not share contextvars)
_current: contextvars.ContextVar[Principal] = contextvars.ContextVar(
    "hqueue_principal", default=ANONYMOUS
)


def current_principal() -> Principal:
    return _current.get()


def set_current_principal(principal: Principal) -> None:
    """Called by the server when a connection starts, in that connection's greenlet."""
    _current.set(principal)


class AdminPolicy:
    """``identities``: certificate common names that may administer; ``tokens``: secrets that
    may. Both None: unrestricted."""

    def __init__(
        self, identities: Iterable[str] | None = None, tokens: Iterable[bytes] | None = None
    ) -> None:
        self.identities = frozenset(identities) if identities is not None else None
        self.tokens = tuple(tokens) if tokens is not None else None

    @classmethod
    def from_options(cls, identities: str | None, token_file: str | None) -> AdminPolicy:
        """From the flags' values; raises ValueError naming the flag."""
        names = None
        if identities is not None:
            names = [n.strip() for n in identities.split(",") if n.strip()]
            if not names:
                raise ValueError("--admin-identities: list at least one common name")
        tokens = None
        if token_file is not None:
            tokens = read_tokens(token_file)
        return cls(names, tokens)

    @property
    def restricted(self) -> bool:
        return self.identities is not None or self.tokens is not None

    def token_valid(self, token: bytes | str | None) -> bool:
        if token is None or not self.tokens:
            return False
        raw = token.encode() if isinstance(token, str) else token
        # compare with every token, in constant time, so timing tells nothing
        matched = False
        for known in self.tokens:
            matched |= hmac.compare_digest(raw, known)
        return matched

    def is_admin(self, who: Principal) -> bool:
        if not self.restricted:
            return True
        if who.token:
            return True
        return (
            self.identities is not None
            and who.common_name is not None
            and who.common_name in self.identities
        )

    def check(self, who: Principal | bytes | str | None, action: str) -> None:
        """Returns if ``who`` may do ``action``; else logs and raises InvalidArgument.
        A str/bytes ``who`` is a presented token; None is an anonymous caller."""
        if action not in ADMIN_ACTIONS or not self.restricted:
            return
        if who is None:
            who = ANONYMOUS
        elif isinstance(who, (bytes, str)):
            who = Principal(token=self.token_valid(who))
        if self.is_admin(who):
            return
        log.warning("refused %s to %s: not an administrator", action, who)
        raise InvalidArgument("identity", f"{who} is not allowed to {action} ({self._how()})")

    def authenticate(self, token: Any) -> None:
        """The ``authenticate`` call: marks the current connection as an administrator's."""
        who = current_principal()
        if not isinstance(token, (bytes, str)) or not token:
            raise InvalidArgument("token", "must be a non-empty string")
        if not self.tokens:
            raise InvalidArgument(
                "token", "this gateway takes no admin tokens (it has no --admin-token-file)"
            )
        if not self.token_valid(token):
            log.warning("refused authenticate from %s: wrong token", who)
            raise InvalidArgument("token", "not a valid admin token")
        set_current_principal(replace(who, token=True))
        log.info("%s authenticated with an admin token", who)

    def _how(self) -> str:
        ways = []
        if self.identities is not None:
            ways.append("a client certificate of an --admin-identities name")
        if self.tokens is not None:
            ways.append("authenticate() with an admin token")
        return "administrators only: " + " or ".join(ways)


def read_tokens(path: str) -> list[bytes]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ValueError(f"--admin-token-file: cannot read {path}: {exc}") from None
    tokens = [
        line.strip().encode() for line in text.splitlines() if line.strip() and not
        line.strip().startswith("#")
    ]  # fmt: skip
    if not tokens:
        raise ValueError(f"--admin-token-file: {path} holds no token")
    short = [t for t in tokens if len(t) < 16]
    if short:
        raise ValueError(f"--admin-token-file: tokens must be at least 16 characters ({path})")
    return tokens


class GuardedHandler:
    """The service as the Thrift processor sees it: admin methods checked against the policy
    of the calling connection, and ``authenticate`` answered here. Every other attribute is
    the service's own (cached on first use, so puts pay one lookup, as before)."""

    def __init__(self, service: Any, policy: AdminPolicy) -> None:
        self._service = service
        self._policy = policy

    def authenticate(self, token: Any) -> None:
        self._policy.authenticate(token)

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._service, name)
        if name in ADMIN_ACTIONS:
            policy = self._policy

            def guarded(*args: Any) -> Any:
                policy.check(current_principal(), name)
                return target(*args)

            value: Any = guarded
        else:
            value = target
        self.__dict__[name] = value
        return value
