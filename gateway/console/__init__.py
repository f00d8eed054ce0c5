"""The web console (``--console-port``): HTML pages and an ``/api/`` JSON API over the
gateway's own service object. See docs/CONSOLE.md."""

from .app import create_app

__all__ = ["create_app"]
