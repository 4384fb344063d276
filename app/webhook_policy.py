"""Where webhooks may go: public receivers only, unless the operator allows more (server-side request forgery).

Anyone who may create or report a run can name webhook URLs (``notify.urls``), and the worker then POSTs
to them from inside the operator's network. So, as hosted webhook services do, a receiver must be a
public address: loopback, private, link-local (cloud metadata at 169.254.169.254), multicast,
unspecified, reserved and other non-global addresses are refused, IPv4-mapped IPv6 and the decimal,
octal and short IPv4 forms included (URLs are normalised as WHATWG does before they are read here).

The check is made twice:

- at submission (:func:`submission_problem`), on what the URL alone tells: a literal address, a
  ``localhost`` name, the operator's rules for per-run URLs (``TINYGPT_RUN_WEBHOOKS``);
- at delivery, on the address the connection actually uses: :class:`GuardedTransport` resolves the
  name once, checks every address it got, and connects to the address it checked. A name that
  resolves to 127.0.0.1, or that answers a public address to a first lookup and 127.0.0.1 to a
  second, never reaches inside.

``TINYGPT_WEBHOOK_ALLOW`` names host names and address ranges (CIDR) that are allowed all the same: a
receiver on the local network.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

import httpcore
import httpx

from .errors import Invalid

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
#: What per-run webhook URLs (``notify.urls``) may be: any public receiver (and the allowed ones), only the
#: allowed ones, or none (the settings' webhooks only).
RunWebhooks = Literal["any-public", "allow-list", "off"]
RUN_WEBHOOK_POLICIES: tuple[str, ...] = ("any-public", "allow-list", "off")
LOOPBACK_NAMES = ("localhost", "localhost.")
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}")


class ReceiverRefused(ValueError):
    """A webhook receiver this dashboard may not send to; the message says why, in one line."""


def parse_allow_entry(entry: str) -> str | IPNetwork:
    """An allow-list entry: an address range (``10.0.0.0/8``, ``192.168.1.5``) or a host name (lower case).

    >>> parse_allow_entry("192.168.1.0/24"), parse_allow_entry("Hooks.LAN")
    (IPv4Network('192.168.1.0/24'), 'hooks.lan')
    """
    text = entry.strip()
    try:
        return ipaddress.ip_network(text.strip("[]"), strict=False)
    except ValueError:
        pass
    if not HOST_NAME.fullmatch(text):
        raise ValueError(f"an allow-list entry is a host name or an address range such as 10.0.0.0/8, got {entry!r}")
    return text.lower().rstrip(".")


def address_problem(address: IPAddress) -> str | None:
    """Why ``address`` is not a public receiver ("a loopback address", ...), or None when it is one.

    >>> address_problem(ipaddress.ip_address("127.0.0.1")), address_problem(ipaddress.ip_address("::ffff:10.0.0.1"))
    ('a loopback address', 'a private address')
    >>> address_problem(ipaddress.ip_address("169.254.169.254")), address_problem(ipaddress.ip_address("8.8.8.8"))
    ('a link-local address', None)
    """
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    checks = [("loopback", "a loopback address"), ("unspecified", "an unspecified address"),
              ("link_local", "a link-local address"), ("multicast", "a multicast address"),
              ("private", "a private address"), ("reserved", "a reserved address")]
    for attribute, problem in checks:
        if getattr(address, f"is_{attribute}"):
            return problem
    return None if address.is_global else "not a public address"


def as_address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


@dataclass(frozen=True)
class ReceiverPolicy:
    """The operator's rules: the allow-list (``TINYGPT_WEBHOOK_ALLOW``) and what per-run URLs may be
    (``TINYGPT_RUN_WEBHOOKS``). Built from the settings (:meth:`app.settings.Settings.receiver_policy`)."""

    allow: tuple[str | IPNetwork, ...] = ()
    run_webhooks: RunWebhooks = "any-public"

    @classmethod
    def of(cls, allow: Iterable[str], run_webhooks: RunWebhooks = "any-public") -> ReceiverPolicy:
        return cls(tuple(parse_allow_entry(e) for e in allow), run_webhooks)

    def allows_name(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.allow

    def allows_address(self, address: IPAddress) -> bool:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(not isinstance(e, str) and address.version == e.version and address in e for e in self.allow)

    def literal_problem(self, host: str) -> str | None:
        """What the host alone shows (a literal address, a loopback name), unless it is allowed; None otherwise."""
        if self.allows_name(host):
            return None
        address = as_address(host)
        if address is not None:
            problem = address_problem(address)
            return None if problem is None or self.allows_address(address) else f"{host} is {problem}"
        if host.lower() in LOOPBACK_NAMES or host.lower().rstrip(".").endswith(".localhost"):
            return f"{host} is a loopback name"
        return None

    def submission_problem(self, url: str, *, per_run: bool) -> str | None:
        """Why a webhook URL is refused when it is given (None: accepted for now; its address is checked
        again when it is sent). ``per_run``: a run's own URL (``notify.urls``), under ``run_webhooks``."""
        host = urlsplit(url).hostname or ""
        if per_run and self.run_webhooks == "off":
            return "this dashboard takes no per-run webhook URLs (TINYGPT_RUN_WEBHOOKS=off)"
        if per_run and self.run_webhooks == "allow-list" and not self.allows_name(host) and not (
                as_address(host) is not None and self.allows_address(as_address(host))):
            return f"{host} is not on this dashboard's webhook allow-list (TINYGPT_WEBHOOK_ALLOW)"
        problem = self.literal_problem(host)
        return f"{problem}: webhooks go to public receivers (allow a local one with TINYGPT_WEBHOOK_ALLOW)" \
            if problem else None

    def check_run_urls(self, urls: Iterable[object], *, field: str = "notify.urls") -> None:
        """A run's own webhook URLs at submission: a 422 naming the first refused one (``notify.urls.0``)."""
        for index, url in enumerate(urls):
            problem = self.submission_problem(str(url), per_run=True)
            if problem:
                raise Invalid(problem, field=f"{field}.{index}")

    def connect_address(self, host: str, port: int) -> str:
        """The address to connect to for ``host``: resolved once, checked, returned (ReceiverRefused when
        no address of it may be reached)."""
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise ReceiverRefused(f"cannot resolve {host}: {exc.strerror}") from None
        name_allowed = self.allows_name(host)
        problems = []
        for info in infos:
            address = ipaddress.ip_address(info[4][0].split("%")[0])
            problem = None if name_allowed or self.allows_address(address) else address_problem(address)
            if problem is None:
                return str(address)
            problems.append(f"{address} ({problem})")
        raise ReceiverRefused(f"{host} resolves to {', '.join(problems)}: webhooks go to public receivers "
                              "(allow a local one with TINYGPT_WEBHOOK_ALLOW)")


class GuardedBackend(httpcore.SyncBackend):
    """httpcore's network backend, connecting only to an address the policy checked (TLS still checks the
    certificate against the URL's host name: httpcore starts TLS with it)."""

    def __init__(self, policy: ReceiverPolicy) -> None:
        self.policy = policy

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable | None = None) -> httpcore.NetworkStream:
        address = self.policy.connect_address(host, port)
        return super().connect_tcp(address, port, timeout=timeout, local_address=local_address,
                                   socket_options=socket_options)


class GuardedTransport(httpx.HTTPTransport):
    """httpx's own transport over :class:`GuardedBackend`; no proxy from the environment (a proxy would
    make the connection, and the check, somewhere else)."""

    def __init__(self, policy: ReceiverPolicy) -> None:
        super().__init__(trust_env=False)
        # httpx builds its connection pool without a way to name the network backend: build it again with ours
        self._pool = httpcore.ConnectionPool(ssl_context=httpx.create_ssl_context(trust_env=False),
                                             network_backend=GuardedBackend(policy))
