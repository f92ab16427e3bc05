"""What the tests' stdlib HTTP servers share: a quiet handler and a daemon serving thread."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no per-request lines in the test output
        pass


def serve(host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """A server on its own daemon thread that closes without waiting for handlers
    (a test's hung or slow handler must not hold up the test's end)."""
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    server.block_on_close = False
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
