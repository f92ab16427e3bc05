"""A real HTTP document server (threads, stdlib) for the document-fetch tests.

``files`` maps a path to (content type, body). Other paths pick a behaviour:
``/redirect?to=<url>`` answers 302 to that URL, ``/loop`` redirects to itself,
``/huge`` streams ``huge_bytes`` without a Content-Length (the reader must count),
``/huge-declared`` declares them first, ``/slow`` sends its headers and then one byte
every ``slow_step_s`` (until ``slow_bytes`` or the server stops), ``/missing`` is 404.
It binds ``host`` (127.0.0.1 by default; any 127.x address is loopback on Linux, so a
test can allow one of them and still see 127.0.0.1 refused).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from serve_app.testing.threaded_http import QuietHandler, serve


@dataclass
class DocumentServer:
    host: str = "127.0.0.1"
    port: int = 0
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    huge_bytes: int = 8 * 1024 * 1024
    slow_bytes: int = 200
    slow_step_s: float = 0.05
    hits: list[str] = field(default_factory=list)  # paths asked, in order
    _server: ThreadingHTTPServer | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def start(self) -> DocumentServer:
        owner = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                with owner._lock:
                    owner.hits.append(self.path)
                # A fetcher that stopped reading (a capped read) resets the connection.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    owner._answer(self)

        self._server = serve(self.host, self.port, Handler)
        self.port = self._server.server_address[1]
        return self

    def _answer(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        if parts.path in self.files:
            ctype, body = self.files[parts.path]
            h.send_response(200)
            h.send_header("content-type", ctype)
            h.send_header("content-length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
        elif parts.path in ("/redirect", "/loop"):
            to = parse_qs(parts.query).get("to", [""])[0] if parts.path == "/redirect" else "/loop"
            h.send_response(302)
            h.send_header("location", to)
            h.send_header("content-length", "0")
            h.end_headers()
        elif parts.path in ("/huge", "/huge-declared"):
            h.send_response(200)
            h.send_header("content-type", "text/plain")
            if parts.path == "/huge-declared":
                h.send_header("content-length", str(self.huge_bytes))
            h.end_headers()
            chunk = b"x" * 65536
            for _ in range(self.huge_bytes // len(chunk)):
                if self._stop.is_set():
                    return
                h.wfile.write(chunk)
        elif parts.path == "/slow":
            h.send_response(200)
            h.send_header("content-type", "text/plain")
            h.send_header("content-length", str(self.slow_bytes))
            h.end_headers()
            for _ in range(self.slow_bytes):
                if self._stop.wait(self.slow_step_s):
                    return
                h.wfile.write(b"s")
                h.wfile.flush()
        else:
            h.send_response(404)
            h.send_header("content-length", "0")
            h.end_headers()

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
