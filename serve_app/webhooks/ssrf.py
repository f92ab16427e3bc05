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
checked addresses too. IPv4 addresses inside IPv6 (mapped, compatible, 6to4, Teredo,
NAT64) are judged as the IPv4 address they carry.

"Public" is Python's ``is_global`` and, on top of it, every block of the IANA IPv4 and
IPv6 special-purpose address registries that is not globally reachable (Python's list
lags the registries: NAT64's local-use prefix, the 6to4 relay anycast, the 2024
documentation and SRv6 blocks, IPv4-compatible IPv6).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

import httpx

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# IANA special-purpose blocks that are not "globally reachable" (RFC 6890 registries,
# as of 2025), whatever this Python's ``is_global`` says of them.
NOT_GLOBAL = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",  # "this network"
        "10.0.0.0/8",
        "100.64.0.0/10",  # shared address space (carrier-grade NAT)
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",
        "192.88.99.0/24",  # deprecated 6to4 relay anycast
        "192.168.0.0/16",
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and the broadcast address
        "::/96",  # unspecified, loopback, deprecated IPv4-compatible (judged by the IPv4)
        "64:ff9b:1::/48",  # NAT64 local use (RFC 8215)
        "100::/64",  # discard-only
        "2001::/23",  # IETF protocol assignments (Teredo is judged by its IPv4 first)
        "2001:db8::/32",  # documentation
        "3fff::/20",  # documentation (RFC 9637)
        "5f00::/16",  # SRv6 SIDs (RFC 9602)
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "ff00::/8",  # multicast
    )
)
NAT64 = ipaddress.ip_network("64:ff9b::/96")  # well-known prefix: the IPv4 is the target
COMPATIBLE = ipaddress.ip_network("::/96")


class Refused(ValueError):
    """The URL may not be a target (webhook, document fetch); the message says why."""


def embedded_v4(address: Address) -> Address:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, Teredo client, NAT64's
    well-known prefix, IPv4-compatible), else itself."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address.teredo is not None:
            return address.teredo[1]
        if address in NAT64 or (address in COMPATIBLE and int(address) > 1):
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


class TargetGuard:
    def __init__(
        self, allowed_networks: Sequence[str] = (), *, allow_private: bool = False
    ) -> None:
        self.allowed = [ipaddress.ip_network(n, strict=False) for n in allowed_networks]
        self.allow_private = allow_private  # development and tests only: any address

    def shape(self, url: str) -> tuple[str, int]:
        """Host and port of a well-formed http(s) URL without credentials; else Refused.
        Well-formed for the HTTP client too: a URL it cannot parse (a control character,
        a broken IPv6 literal) would fail at send time, after the check said yes."""
        try:
            parts = urlsplit(url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            httpx.URL(url)
        except (ValueError, httpx.InvalidURL) as exc:
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
        if address in NAT64:
            return True  # the gateway's prefix: where it goes is the IPv4, judged above
        if any(address in net for net in NOT_GLOBAL if net.version == address.version):
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
