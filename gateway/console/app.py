"""The console's WSGI application (Flask + Jinja2 templates, no build step, no script).

Pages: ``/queues``, ``/queues/<q>``, ``/queues/<q>/messages``, ``/queues/<q>/subscribers``,
``/gateways``; each has its JSON twin under ``/api/`` (docs/CONSOLE.md). Changes (create,
truncate, disable, enable, delete) are POSTs that :func:`gateway.console.auth.authorize`
must allow; the destructive ones ask the user to type the queue's name first.

Requests are served by gevent's ``pywsgi`` in the gateway process, on the event loop every
other request uses: a page does what a Thrift call would, with the same bounded scans.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from flask import Flask, abort, flash, jsonify, redirect, render_template, request, url_for
from markupsafe import Markup
from werkzeug.exceptions import HTTPException

from ..errors import HQueueError, InvalidArgument
from . import auth
from .charts import line_chart
from .data import DEFAULT_PAGE, ConsoleData, Cursor, MessageFilter, NotFound, parse_int, parse_time

log = logging.getLogger(__name__)

ACTIONS = ("truncate", "disable", "enable", "delete")
CONFIRMED = ("truncate", "delete")  # the ones that lose data: type the name to confirm


def create_app(
    data: ConsoleData,
    authorize: Callable[[dict[str, Any]], str] = auth.authorize,
    *,
    token_field: bool = False,
) -> Flask:
    """``token_field``: the pages' forms ask for an admin token (``--admin-token-file``)."""
    app = Flask(__name__)

    @app.context_processor
    def _admin_token_field() -> dict[str, Any]:
        return {"admin_token_field": token_field}

    app.secret_key = secrets.token_bytes(32)  # only signs flash messages of this process
    app.config["MAX_CONTENT_LENGTH"] = 64 * 1024
    app.json.sort_keys = False  # type: ignore[attr-defined]

    def admin(what: str) -> str:
        """Refuses a cross-site request, asks ``authorize``, logs who does what."""
        origin = request.headers.get("Origin")
        if origin and urlsplit(origin).netloc != request.host:
            raise auth.NotAllowed(f"a request from {origin} may not change {request.host}")
        who = authorize(request.environ)
        log.info("console: %s by %s", what, who)
        return who

    # -- errors ---------------------------------------------------------------------------

    def status_of(exc: Exception) -> int:
        if isinstance(exc, NotFound):
            return 404
        if isinstance(exc, auth.NotAllowed):
            return 403
        if isinstance(exc, InvalidArgument):
            return 400
        return 503  # the store's fault: retrying later may succeed

    @app.errorhandler(HQueueError)
    @app.errorhandler(auth.NotAllowed)
    def on_error(exc: Exception) -> Any:
        status = status_of(exc)
        if request.path.startswith("/api/"):
            body: dict[str, Any] = {"error": str(exc)}
            if isinstance(exc, InvalidArgument):
                body["argument"] = exc.argument
            return jsonify(body), status
        return render_template("error.html", status=status, message=str(exc)), status

    @app.errorhandler(HTTPException)
    def on_http_error(exc: HTTPException) -> Any:
        if request.path.startswith("/api/"):
            return jsonify({"error": exc.description}), exc.code
        return render_template("error.html", status=exc.code, message=exc.description), exc.code

    # -- pages ----------------------------------------------------------------------------

    @app.get("/")
    def index() -> Any:
        return redirect(url_for("queues_page"))

    @app.get("/queues")
    def queues_page() -> Any:
        return render_template("queues.html", queues=data.queues())

    @app.post("/queues")
    def create_page() -> Any:
        form = request.form
        name = form.get("name", "").strip()
        admin(f"create queue {name!r}")
        data.create_queue(
            name,
            parse_int(form.get("partitions"), "partitions"),
            parse_int(form.get("ttl_seconds"), "ttl_seconds"),
        )
        flash(f"Created queue {name}.")
        return redirect(url_for("queue_page", name=name), 303)

    @app.get("/queues/<name>")
    def queue_page(name: str) -> Any:
        return render_template("queue.html", q=data.queue(name))

    @app.get("/queues/<name>/<action>")
    def confirm_page(name: str, action: str) -> Any:
        if action not in ACTIONS:
            abort(404)
        return render_template(
            "confirm.html", q=data.queue(name), action=action, typed=action in CONFIRMED
        )

    @app.post("/queues/<name>/<action>")
    def action_page(name: str, action: str) -> Any:
        if action not in ACTIONS:
            abort(404)
        if action in CONFIRMED and request.form.get("confirm") != name:
            raise InvalidArgument("confirm", f"type the queue's name ({name}) to {action} it")
        admin(f"{action} queue {name!r}")
        data.act(name, action)
        flash(f"Queue {name}: {action} done.")
        if action == "delete":
            return redirect(url_for("queues_page"), 303)
        return redirect(url_for("queue_page", name=name), 303)

    @app.get("/queues/<name>/messages")
    def messages_page(name: str) -> Any:
        args = request.args
        flt, before, limit = _message_args(args)
        page = data.messages(name, flt, before, limit)
        query: dict[str, Any] = {k: v for k, v in args.items() if v and k != "before"}
        next_url = (
            url_for("messages_page", name=name, before=page["next"], **query)
            if page["next"]
            else None
        )
        return render_template(
            "messages.html", q=data.queue(name), page=page, args=args, next_url=next_url,
            first_url=url_for("messages_page", name=name, **query) if before else None,
        )  # fmt: skip

    @app.get("/queues/<name>/subscribers")
    def subscribers_page(name: str) -> Any:
        subs = data.subscribers(name)
        # Markup: the charts are built from numbers and escaped text only
        charts = {
            s["name"]: Markup(
                line_chart(
                    [(h["time"], h["messages"]) for h in s["history"]],
                    title=f"Lag of {s['name']} in messages",
                    unit="messages",
                    chart_id=f"lag{i}",
                )
                + line_chart(
                    [(h["time"], h["seconds"]) for h in s["history"]],
                    title=f"Lag of {s['name']} in seconds",
                    unit="s",
                    chart_id=f"age{i}",
                )
            )
            for i, s in enumerate(subs)
        }
        return render_template("subscribers.html", q=data.queue(name), subs=subs, charts=charts)

    @app.get("/gateways")
    def gateways_page() -> Any:
        return render_template("gateways.html", g=data.gateways())

    # -- the JSON API ---------------------------------------------------------------------

    @app.get("/api/queues")
    def api_queues() -> Any:
        return jsonify({"queues": data.queues()})

    @app.post("/api/queues")
    def api_create() -> Any:
        body = _json_body()
        admin(f"create queue {body.get('name')!r}")
        q = data.create_queue(
            body.get("name"), body.get("partitions"), body.get("ttl_seconds"),
            body.get("config") or {},
        )  # fmt: skip
        return jsonify(q), 201

    @app.get("/api/queues/<name>")
    def api_queue(name: str) -> Any:
        return jsonify(data.queue(name))

    @app.delete("/api/queues/<name>")
    def api_delete(name: str) -> Any:
        _confirmed(name, "delete")
        admin(f"delete queue {name!r}")
        data.act(name, "delete")
        return jsonify({"deleted": name})

    @app.post("/api/queues/<name>/<action>")
    def api_action(name: str, action: str) -> Any:
        if action not in ("truncate", "disable", "enable"):
            abort(404)
        _json_body()
        if action in CONFIRMED:
            _confirmed(name, action)
        admin(f"{action} queue {name!r}")
        data.act(name, action)
        return jsonify(data.queue(name))

    @app.get("/api/queues/<name>/messages")
    def api_messages(name: str) -> Any:
        flt, before, limit = _message_args(request.args)
        return jsonify(data.messages(name, flt, before, limit))

    @app.get("/api/queues/<name>/subscribers")
    def api_subscribers(name: str) -> Any:
        return jsonify({"queue": name, "subscribers": data.subscribers(name)})

    @app.get("/api/gateways")
    def api_gateways() -> Any:
        return jsonify(data.gateways())

    @app.context_processor
    def globals_() -> dict[str, Any]:
        return {"advertise": data.service.advertise, "pid": os.getpid()}

    return app


def _message_args(args: Any) -> tuple[MessageFilter, Cursor | None, int]:
    topic = args.get("topic") or None
    flt = MessageFilter(
        topic=topic.encode() if topic else None,
        partition=parse_int(args.get("partition"), "partition"),
        since_ms=parse_time(args.get("from"), "from"),
        until_ms=parse_time(args.get("to"), "to"),
        key=args.get("key").encode() if args.get("key") else None,
    )
    raw = args.get("before")
    before = Cursor.parse(raw) if raw else None
    limit = parse_int(args.get("limit"), "limit") or DEFAULT_PAGE
    return flt, before, limit


def _json_body() -> dict[str, Any]:
    """The request's JSON object. Requiring JSON also keeps other sites' plain HTML forms
    out: a browser sends a cross-site JSON request only after a CORS check we never pass."""
    if not request.is_json:
        raise InvalidArgument("Content-Type", "must be application/json")
    body = request.get_json(silent=True)
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise InvalidArgument("body", "must be a JSON object")
    return body


def _confirmed(name: str, action: str) -> None:
    if request.args.get("confirm") != name:
        raise InvalidArgument("confirm", f"pass ?confirm={name} to {action} the queue")
