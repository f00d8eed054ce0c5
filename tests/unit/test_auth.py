"""The admin policy (gateway/auth.py) in-process: who may administer, and what a refusal says."""

from __future__ import annotations

import logging
from typing import Any

import gevent
import pytest

from gateway.auth import (
    ADMIN_ACTIONS,
    AdminPolicy,
    GuardedHandler,
    Principal,
    current_principal,
    set_current_principal,
)
from gateway.errors import InvalidArgument

TOKEN = b"a-token-of-at-least-16-chars"


class Service:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def createQueue(self, *args: Any) -> None:
        self.calls.append("createQueue")

    def putMessages(self, *args: Any) -> None:
        self.calls.append("putMessages")


def test_unrestricted_policy_allows_everyone() -> None:
    policy = AdminPolicy()
    assert not policy.restricted
    for action in ADMIN_ACTIONS:
        policy.check(None, action)


def test_identities_and_tokens(caplog: pytest.LogCaptureFixture) -> None:
    policy = AdminPolicy(identities=["alice"], tokens=[TOKEN])
    policy.check(Principal("alice"), "deleteQueue")
    policy.check(Principal(token=True), "deleteQueue")
    policy.check(TOKEN.decode(), "truncateQueue")  # a presented token, as the console passes it
    policy.check(Principal("bob"), "putMessages")  # not an admin action
    with (
        caplog.at_level(logging.WARNING, "gateway.auth"),
        pytest.raises(InvalidArgument) as info,
    ):
        policy.check(Principal("bob", peer="10.0.0.5:4711"), "deleteQueue")
    assert info.value.argument == "identity"
    assert "CN=bob at 10.0.0.5:4711 is not allowed to deleteQueue" in str(info.value)
    assert "refused deleteQueue to CN=bob at 10.0.0.5:4711" in caplog.text
    for who in (None, "wrong-token-but-long-enough", Principal("ALICE")):
        with pytest.raises(InvalidArgument, match="not allowed"):
            policy.check(who, "createQueue")


def test_token_file(tmp_path: Any) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"# comment\n\n{TOKEN.decode()}\n")
    assert AdminPolicy.from_options(None, str(path)).token_valid(TOKEN)
    path.write_text("short\n")
    with pytest.raises(ValueError, match="at least 16"):
        AdminPolicy.from_options(None, str(path))
    with pytest.raises(ValueError, match="at least one"):
        AdminPolicy.from_options(" , ", None)


def test_guarded_handler_marks_only_the_calling_connection() -> None:
    service = Service()
    handler = GuardedHandler(service, AdminPolicy(tokens=[TOKEN]))

    def connection(token: bytes | None) -> str:
        set_current_principal(Principal(peer="p"))  # what the server does per connection
        if token is not None:
            handler.authenticate(token)
        handler.putMessages(b"q", [])
        try:
            handler.createQueue(b"q", 1, 1, {})
        except InvalidArgument as exc:
            return str(exc)
        return "ok"

    admin, other = gevent.spawn(connection, TOKEN), gevent.spawn(connection, None)
    gevent.joinall([admin, other], raise_error=True)
    assert admin.value == "ok" and "not allowed to createQueue" in other.value
    assert service.calls.count("putMessages") == 2 and service.calls.count("createQueue") == 1
    with pytest.raises(InvalidArgument, match="not a valid admin token"):
        handler.authenticate(b"x" * 20)
    assert not current_principal().token
