"""Which addresses a crawler may connect to: never an internal one (server-side request forgery).

A page or feed from the web names URLs, and a redirect can point anywhere; fetched blindly,
``http://169.254.169.254/`` reads a cloud host's credentials and ``http://10.0.0.1/`` an
intranet. :class:`AddressGuard` resolves a host (a name, or an IP literal in any form the
system resolver accepts — dotted, decimal ``2852039166``, IPv6, IPv4-mapped IPv6) and refuses
it when any address is not globally routable (:attr:`ipaddress.IPv4Address.is_global`:
loopback, private, link-local, shared, reserved, documentation, unspecified) or is multicast,
unless its name is in ``allow_hosts`` or its address in ``allow_networks`` (tests, intranet
feeds). OWASP: https://cheatsheetseries.owasp.org/cheatsheets/Server_Side_Request_Forgery_Prevention_Cheat_Sheet.html

The check runs before every connection, redirects included; a name that resolves differently
between the check and the connection (DNS rebinding) is not caught here.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from typing import Any

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]


class BlockedAddress(Exception):
    """The host resolves to an address the guard refuses (the message says which and why)."""


def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (``socket.getaddrinfo``)."""
    infos: list[Any] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


def refused_kind(address: Address) -> str | None:
    """Why ``address`` is internal (loopback, private, …), or None for a public one."""
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        return refused_kind(mapped)
    for kind in ("loopback", "link_local", "multicast", "unspecified", "private", "reserved"):
        if getattr(address, f"is_{kind}"):
            return kind.replace("_", "-")
    return None if address.is_global else "not globally routable"


class AddressGuard:
    def __init__(
        self,
        allow_hosts: Sequence[str] = (),
        allow_networks: Sequence[str] = (),
        resolver: Resolver = system_resolver,
    ) -> None:
        self.allow_hosts = {h.strip().lower().strip("[]") for h in allow_hosts}
        self.allow_networks = [ipaddress.ip_network(n, strict=False) for n in allow_networks]
        self.resolver = resolver

    def check(self, host: str, port: int) -> None:
        """Nothing when ``host`` may be fetched; :class:`BlockedAddress` otherwise."""
        name = host.strip().lower().strip("[]")
        if name in self.allow_hosts:
            return
        try:
            addresses = [ipaddress.ip_address(a.split("%")[0]) for a in self.resolver(name, port)]
        except (OSError, UnicodeError, ValueError) as err:
            raise BlockedAddress(f"{host} does not resolve ({err})") from None
        for address in addresses:
            kind = refused_kind(address)
            if kind and not any(address in network for network in self.allow_networks):
                raise BlockedAddress(
                    f"{host} resolves to {address} ({kind}): internal addresses are not fetched "
                    "(allow it with fetch.allow_hosts or fetch.allow_networks)"
                )
