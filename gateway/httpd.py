"""HTTP listeners of the gateway process (metrics, console): gevent's ``pywsgi`` on the same
event loop as the Thrift server, so nothing here needs a thread."""

from __future__ import annotations

import logging
from typing import Any

from gevent.pywsgi import WSGIServer

log = logging.getLogger(__name__)


def serve_wsgi(app: Any, host: str, port: int, what: str) -> WSGIServer:
    """Starts serving ``app`` on ``host:port`` (0: any free port) and returns the server;
    ``server.server_port`` is the port bound. No access log: scrapes would flood it."""
    server = WSGIServer((host, port), app, log=None, error_log=log)
    server.start()
    log.info("serving %s on http://%s:%d/", what, host, server.server_port)
    return server


def metrics_app(stats: Any, gauges: Any) -> Any:
    """The Prometheus endpoint: a registry of our collector and the process collector."""
    from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app

    from .metrics import StatsCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatsCollector(stats, gauges))  # type: ignore[arg-type]
    ProcessCollector(registry=registry)  # CPU, memory, open files of the gateway process
    return make_wsgi_app(registry)
