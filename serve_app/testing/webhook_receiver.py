"""A real HTTP webhook receiver on 127.0.0.1 (threads, stdlib) for the dispatcher tests.

It speaks HTTP/1.1 with keep-alive, as real receivers do (a sender's pooled
connection is reused); once stopped it drops kept-alive connections unanswered.
Paths pick the behaviour: ``/ok`` answers 204, ``/fail`` 500, ``/hang`` sleeps
``hang_s`` before answering, ``/huge`` streams ``huge_bytes`` of body. Every request
is recorded (path, headers, body) before the answer, so a sender killed mid-request
still left its request here.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = 0.0  # time.time() on arrival (lag measurements)


@dataclass
class Receiver:
    port: int = 0
    hang_s: float = 5.0
    huge_bytes: int = 50 * 1024 * 1024
    received: list[Received] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def at(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path == path]

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real receivers (uvicorn, nginx)

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                if receiver._server is not server:  # stopped: as if the process were gone
                    self.close_connection = True
                    return
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with receiver._lock:
                    receiver.received.append(
                        Received(self.path, dict(self.headers), body, time.time())
                    )
                try:
                    if self.path == "/hang":
                        time.sleep(receiver.hang_s)
                    if self.path == "/huge":
                        self.send_response(200)
                        self.send_header("content-length", str(receiver.huge_bytes))
                        self.end_headers()
                        chunk = b"x" * 65536
                        for _ in range(receiver.huge_bytes // len(chunk)):
                            self.wfile.write(chunk)
                        return
                    self.send_response(500 if self.path == "/fail" else 204)
                    if self.path == "/fail":
                        self.send_header("content-length", "0")
                    self.end_headers()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the sender stopped reading: what a capped read does

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        server.block_on_close = False
        self.port = server.server_address[1]
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
