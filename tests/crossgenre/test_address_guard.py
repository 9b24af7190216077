"""The news fetcher never connects to an internal address (tasks/common/address_guard.py;
issue 30 §2): each forbidden kind through a resolver made here, numeric forms through the
system resolver (no network: they are literals), and a loopback page redirecting to an
internal host. No traffic leaves loopback."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tasks.common.address_guard import AddressGuard, BlockedAddress
from tasks.crossgenre.fetch import FetchConfig, FetchFailed, PoliteFetcher
from tests.fakes.news_server import NewsServer, news_server

__all__ = ["news_server"]  # the fixture, used by parameter name below

FORBIDDEN = {
    "loopback.example": ["127.0.0.1"],
    "private.example": ["10.0.0.1"],
    "private172.example": ["172.16.5.4"],
    "private192.example": ["192.168.1.1"],
    "metadata.example": ["169.254.169.254"],
    "v6-metadata.example": ["fd00:ec2::254"],
    "v6-loopback.example": ["::1"],
    "mapped.example": ["::ffff:127.0.0.1"],
    "link-local-v6.example": ["fe80::1"],
    "shared.example": ["100.64.0.1"],
    "unspecified.example": ["0.0.0.0"],
    "multicast.example": ["224.0.0.1"],
    "mixed.example": ["93.184.216.34", "10.1.2.3"],  # one internal address is enough
}


def fake(host: str, port: int) -> Sequence[str]:
    return {**FORBIDDEN, "public.example": ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"]}[host]


@pytest.mark.parametrize("host", sorted(FORBIDDEN))
def test_every_internal_kind_is_refused_naming_the_address(host: str) -> None:
    with pytest.raises(BlockedAddress, match=rf"^{host} resolves to "):
        AddressGuard(resolver=fake).check(host, 80)


@pytest.mark.parametrize(
    "literal",
    ["127.0.0.1", "2852039166", "0x7f000001", "0177.0.0.1", "[::1]", "::ffff:169.254.169.254", "localhost"],
)
def test_numeric_and_named_forms_of_internal_addresses_are_refused(literal: str) -> None:
    with pytest.raises(BlockedAddress):
        AddressGuard().check(literal, 80)  # the system resolver reads literals without the network


def test_public_hosts_pass_and_allow_lists_open_named_hosts_or_networks() -> None:
    AddressGuard(resolver=fake).check("public.example", 443)
    AddressGuard(["private.example"], resolver=fake).check("private.example", 80)
    AddressGuard(allow_networks=["10.0.0.0/8"], resolver=fake).check("private.example", 80)
    with pytest.raises(BlockedAddress):
        AddressGuard(allow_networks=["10.0.0.0/8"], resolver=fake).check("metadata.example", 80)


def test_a_redirect_to_an_internal_host_is_blocked_and_a_malformed_url_fails_cleanly(
    news_server: NewsServer,
) -> None:
    port = news_server.url.rsplit(":", 1)[1]
    news_server.redirects["/go"] = f"http://localhost:{port}/secret"  # same server, a name not allowed
    news_server.page("/secret", "internal")
    fetcher = PoliteFetcher(FetchConfig(allow_hosts=["127.0.0.1"], respect_robots=False), None)
    try:
        with pytest.raises(FetchFailed) as err:
            fetcher.get(news_server.url + "/go")
        assert err.value.reason == "blocked_address" and "localhost resolves to 127.0.0.1" in err.value.detail
        assert not any(r.path == "/secret" for r in news_server.requests)
        with pytest.raises(FetchFailed) as bad:
            fetcher.get("http://[::1/x")
        assert bad.value.reason == "fetch_failed" and "malformed URL" in bad.value.detail
    finally:
        fetcher.close()
    strict = PoliteFetcher(FetchConfig(), None)  # the default: loopback refused
    try:
        with pytest.raises(FetchFailed) as default:
            strict.get(news_server.url + "/secret")
        assert default.value.reason == "blocked_address"
    finally:
        strict.close()
