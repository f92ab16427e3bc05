"""A free TCP port, asked of the kernel; shared by the proxy setup, tests and benchmarks."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on at ``host`` right now (the kernel's pick for port 0).

    Another process may take it before the caller binds it; callers here start their
    server at once, which makes that race rare enough.
    """
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
