"""The SSRF guard of webhooks, document fetches and JWKS: which addresses are public,
table-driven over the IANA special-purpose registries."""

from __future__ import annotations

import ipaddress

import pytest

from serve_app.webhooks.ssrf import NOT_GLOBAL, Refused, TargetGuard, embedded_v4

REFUSED = [
    # IPv4 special-purpose blocks
    "0.1.2.3",
    "10.0.0.1",
    "100.64.0.1",
    "127.0.0.1",
    "169.254.169.254",
    "172.16.0.1",
    "192.0.0.8",
    "192.0.2.1",
    "192.88.99.1",
    "192.168.1.1",
    "198.18.0.1",
    "198.51.100.7",
    "203.0.113.9",
    "224.0.0.1",
    "240.0.0.1",
    "255.255.255.255",
    # IPv6 special-purpose blocks
    "::",
    "::1",
    "::a00:1",
    "::808:808",
    "64:ff9b:1::1",
    "100::1",
    "2001:db8::1",
    "2001:2::1",
    "3fff::1",
    "5f00::1",
    "fc00::1",
    "fd12:3456::1",
    "fe80::1",
    "ff02::1",
    # NAT64 and other IPv6 forms of a private IPv4
    "64:ff9b::a00:1",
    "64:ff9b::7f00:1",
    "64:ff9b::a9fe:a9fe",
    "::ffff:10.0.0.1",
    "2002:a00:1::1",
    "2001:0:4136:e378:8000:63bf:f5ff:fffe",
]
PUBLIC = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "64:ff9b::808:808"]


@pytest.mark.parametrize("address", REFUSED)
def test_special_purpose_addresses_are_refused(address):
    assert not TargetGuard().allowed_address(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_allowed(address):
    assert TargetGuard().allowed_address(ipaddress.ip_address(address))


def test_nat64_is_judged_by_the_ipv4_it_carries():
    assert embedded_v4(ipaddress.ip_address("64:ff9b::a00:1")) == ipaddress.ip_address("10.0.0.1")
    assert TargetGuard(["10.0.0.0/8"]).allowed_address(ipaddress.ip_address("64:ff9b::a00:1"))


def test_the_operator_may_allow_a_special_block():
    guard = TargetGuard(["100.64.0.0/10"])
    assert guard.allowed_address(ipaddress.ip_address("100.64.1.1"))
    assert not guard.allowed_address(ipaddress.ip_address("10.0.0.1"))


def test_every_listed_block_is_refused_at_its_first_and_last_address():
    guard = TargetGuard()
    for net in NOT_GLOBAL:
        for address in (net[0], net[-1]):
            assert not guard.allowed_address(address), address


async def test_a_url_to_a_nat64_private_address_is_refused():
    with pytest.raises(Refused):
        await TargetGuard().check("http://[64:ff9b::a9fe:a9fe]/latest/meta-data")


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/a\x01b",
        "http://exa\x7fmple.com/",
        "http://[::1/jwks",
        "http://example.com:99999/",
        "ftp://example.com/",
        "http://user:pw@example.com/",
    ],
)
async def test_a_url_the_http_client_cannot_send_is_refused_at_the_check(url):
    with pytest.raises(Refused):
        await TargetGuard(allow_private=True).check(url)
