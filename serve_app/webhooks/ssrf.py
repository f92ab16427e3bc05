"""Where the service may send a request a tenant named: http(s) URLs whose every
address is public (SSRF). Webhooks and document fetches (serve_app/documents/fetch.py)
share it.

A tenant names the URL, so without this check a subscription could make the service
POST into its own network (metadata endpoints, databases, admin ports). Private,
loopback, link-local, multicast, reserved and unspecified addresses are refused unless
the operator lists their network in ``MEMSERVE_WEBHOOKS_ALLOWED_NETWORKS``. The check
resolves the host each time a connection is made (a name that moves to a private
address is refused then; a kept-alive connection stays with the address it checked).
``resolve`` returns the addresses it checked, so a caller that connects to one of them
(``pinned``) leaves no window for a rebinding DNS; the webhook sender resolves through
:meth:`TargetGuard.resolve_host` as its connector's resolver, so it connects only to
checked addresses too. IPv4 addresses inside IPv6 (mapped, 6to4,
Teredo) are judged as the IPv4 address they carry.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class Refused(ValueError):
    """The URL may not be a target (webhook, document fetch); the message says why."""


def embedded_v4(address: Address) -> Address:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, Teredo client), else itself."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address.teredo is not None:
            return address.teredo[1]
    return address


class TargetGuard:
    def __init__(
        self, allowed_networks: Sequence[str] = (), *, allow_private: bool = False
    ) -> None:
        self.allowed = [ipaddress.ip_network(n, strict=False) for n in allowed_networks]
        self.allow_private = allow_private  # development and tests only: any address

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
        if self.allow_private or any(address in net for net in self.allowed):
            return True
        inner = embedded_v4(address)
        if inner is not address and not self.allowed_address(inner):
            return False
        return address.is_global and not address.is_multicast

    async def check(self, url: str) -> None:
        """Refused unless every address the URL's host resolves to may be reached."""
        await self.resolve(url)

    async def resolve(self, url: str) -> list[Address]:
        """The addresses of the URL's host, all checked; Refused if any may not be reached
        (a name with one private address among public ones is refused whole)."""
        return await self.resolve_host(*self.shape(url))

    async def resolve_host(self, host: str, port: int) -> list[Address]:
        """:meth:`resolve` for a host and port (a connector's resolver: the webhook
        sender connects only to the addresses this returned)."""
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except (OSError, UnicodeError) as exc:
            raise Refused(f"cannot resolve {host}: {exc}") from None
        addresses: list[Address] = []
        for *_, sockaddr in infos:
            address = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
            if not self.allowed_address(address):
                raise Refused(f"{host} resolves to {address}, a private or reserved address")
            addresses.append(address)
        if not addresses:
            raise Refused(f"{host} does not resolve")
        return addresses
