"""The HTTP API (FastAPI). Routes get their services through ``Depends`` (``api.deps``)."""

from serve_app.api.app import create_app

__all__ = ["create_app"]
