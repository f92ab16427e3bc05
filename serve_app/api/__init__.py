"""The HTTP API (FastAPI). Routers read their collaborators from ``serve_app.api.state``."""

from serve_app.api.app import create_app

__all__ = ["create_app"]
