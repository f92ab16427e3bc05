"""Where a webhook may be sent: http(s) URLs whose every address is public (SSRF).

A tenant names the URL, so without this check a subscription could make the service
POST into its own network (metadata endpoints, databases, admin ports). Private,
loopback, link-local, multicast, reserved and unspecified addresses are refused unless
the operator lists their network in ``MEMSERVE_WEBHOOKS_ALLOWED_NETWORKS``. The check
resolves the host each time it sends (a name that moves to a private address is refused
then); the connection re-resolves, so a rebinding window remains (see docs/events.md).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class Refused(ValueError):
    """The URL may not be a webhook target; the message says why."""


class TargetGuard:
    def __init__(self, allowed_networks: Sequence[str] = ()) -> None:
        self.allowed = [ipaddress.ip_network(n, strict=False) for n in allowed_networks]

    def shape(self, url: str) -> tuple[str, int]:
        """Host and port of a well-formed http(s) URL without credentials; else Refused."""
        try:
            parts = urlsplit(url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise Refused(f"not a valid URL: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise Refused("the URL must be http(s)://host/...")
        if parts.username or parts.password:
            raise Refused("the URL must not carry credentials")
        return parts.hostname, port

    def allowed_address(self, address: Address) -> bool:
        if any(address in net for net in self.allowed):
            return True
        return address.is_global and not address.is_multicast

    async def check(self, url: str) -> None:
        """Refused unless every address the URL's host resolves to may be reached."""
        host, port = self.shape(url)
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except OSError as exc:
            raise Refused(f"cannot resolve {host}: {exc}") from None
        for *_, sockaddr in infos:
            address = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
            if not self.allowed_address(address):
                raise Refused(f"{host} resolves to {address}, a private or reserved address")
