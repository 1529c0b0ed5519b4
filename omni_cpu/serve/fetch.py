"""Reference audio fetched by admission itself, when `--allow-ref-audio-urls` lists its host.

vLLM-Omni would fetch a `ref_audio` URL with vLLM's media connector: any host (an
internal one too), redirects anywhere, retries for minutes, and all of it while the
request holds a place the stall watch counts as engine work. So admission fetches it
instead, and hands vLLM-Omni the audio as a `data:` URL:

* the host must be allowed: listed by name, inside a listed CIDR, or, with `*`, any
  address that is global; every address it resolves to is checked (so `2130706433`
  and `127.1` are loopback), and the connection goes to the address checked;
* a redirect is followed (at most `MAX_REDIRECTS`) only to an allowed http(s) host;
* one deadline for the whole fetch, `connect_s + read_s` from its start: connecting, every
  redirect, the headers and the body (a host that drips its headers a byte at a time is cut
  there too); past it, 504 naming the host and what it had not finished; a refused
  connection, an unknown host or an error status is a 400 naming it;
* the reply must be audio (its Content-Type `audio/*`, or a generic binary one) and
  at most `max_bytes`.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import ipaddress
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from omni_cpu.serve.asgi import BadBody

MAX_REDIRECTS = 3
ANY_PUBLIC_HOST = "*"
GENERIC_TYPES = ("", "application/octet-stream", "binary/octet-stream")


@dataclass(frozen=True)
class UrlPolicy:
    """Which hosts a reference URL may name, and the bounds on fetching it."""

    allowlist: str  # omni_cpu.envs.SERVE_ALLOW_REF_AUDIO_URLS's form; "" = none is fetched
    connect_s: float
    read_s: float
    max_bytes: int

    @property
    def entries(self) -> list[str]:
        return [entry for entry in self.allowlist.split(",") if entry]

    def address_allowed(self, host: str, address: str) -> bool:
        """Whether `host` (as the URL names it), resolved to `address`, may be fetched from."""
        ip = ipaddress.ip_address(address.split("%")[0])
        for entry in self.entries:
            if entry == ANY_PUBLIC_HOST:
                if ip.is_global:
                    return True
                continue
            try:
                network = ipaddress.ip_network(entry, strict=False)
            except ValueError:  # a host name: listed, so whatever it resolves to
                if host.lower().rstrip(".") == entry:
                    return True
                continue
            if ip in network:
                return True
        return False


def _host_refused(field: str, host: str, why: str) -> BadBody:
    return BadBody(
        400,
        f"{field} names host {host}, which {why}; this server fetches reference audio URLs "
        "only from the hosts serve --allow-ref-audio-urls lists (or send the audio as base64)",
        field,
        "ref_audio_url",
    )


def _resolve(field: str, host: str, port: int, policy: UrlPolicy) -> str:
    """The address to connect to: one `host` resolves to, every one of them allowed."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise BadBody(
            400, f"{field}: host {host} cannot be resolved", field, "ref_audio_fetch"
        ) from None
    addresses = [info[4][0] for info in found]
    refused = [address for address in addresses if not policy.address_allowed(host, address)]
    if not addresses or refused:
        kind = _kind(refused[0]) if refused else "resolves to nothing"
        raise _host_refused(field, host, kind)
    return str(addresses[0])


def _kind(address: str) -> str:
    ip = ipaddress.ip_address(address.split("%")[0])
    for name in ("loopback", "link_local", "private", "multicast", "reserved", "unspecified"):
        if getattr(ip, f"is_{name}"):
            return f"is {name.replace('_', '-')} ({address}) and not listed"
    return f"({address}) is not listed"


class Deadline:
    """One fetch's deadline: what is left of it, and a timer that cuts the socket at it.

    A socket's timeout bounds each read, not the reply: a host that sends a byte every few
    seconds never trips it. The timer shuts the connection down when the deadline passes,
    whatever phase the fetch is in, and the fetch reports what it was doing.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds if seconds > 0 else None
        self.phase = "accept a connection"

    def left(self) -> float | None:
        """Seconds left (at least a moment, so a socket call fails by itself); None: no bound."""
        return None if self.at is None else max(0.001, self.at - time.monotonic())

    @property
    def passed(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at

    def guard(self, sock: socket.socket) -> threading.Timer | None:
        """Start the timer that shuts `sock` down at the deadline (cancel it when done)."""
        left = self.left()
        if left is None:
            return None

        def cut() -> None:
            with contextlib.suppress(OSError):  # already closed: the fetch ended first
                sock.shutdown(socket.SHUT_RDWR)

        timer = threading.Timer(left, cut)
        timer.daemon = True
        timer.start()
        return timer

    def expired(self, field: str, host: str) -> BadBody:
        return BadBody(
            504,
            f"{field}: {host} did not {self.phase} within the {self.seconds:g} s this server "
            "gives a reference audio fetch in all (connecting, redirects, headers and body)",
            field,
            "ref_audio_fetch",
        )


def _connect(
    field: str, scheme: str, host: str, address: str, port: int, deadline: Deadline
) -> tuple[http.client.HTTPConnection, socket.socket]:
    try:
        sock = socket.create_connection((address, port), timeout=deadline.left())
    except TimeoutError:
        raise deadline.expired(field, host) from None
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise BadBody(
            400, f"{field}: cannot connect to {host} ({reason})", field, "ref_audio_fetch"
        ) from None
    if scheme == "https":
        deadline.phase = "complete TLS"
        try:
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        except TimeoutError:
            sock.close()
            raise deadline.expired(field, host) from None
        except (OSError, ssl.SSLError) as error:
            sock.close()
            if deadline.passed:
                raise deadline.expired(field, host) from None
            raise BadBody(
                400, f"{field}: TLS with {host} failed ({error.__class__.__name__})",
                field, "ref_audio_fetch",
            ) from None  # fmt: skip
    connection_type = (
        http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    )
    connection = connection_type(host, port, timeout=deadline.left())
    connection.sock = sock
    return connection, sock


def split_url(field: str, url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path and query) of an http(s) URL; BadBody when malformed."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        parts, port = None, None
    scheme = parts.scheme.lower() if parts else ""
    if parts is None or scheme not in ("http", "https") or not parts.hostname:
        raise BadBody(
            400,
            f"{field} is not a URL this server can fetch (give http(s)://host/path)",
            field,
            "ref_audio_url",
        )
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return scheme, parts.hostname, port or (443 if scheme == "https" else 80), path


def fetch(field: str, url: str, policy: UrlPolicy) -> tuple[bytes, str]:
    """The audio bytes at `url` and their MIME type, within the policy; BadBody otherwise."""
    deadline = Deadline(policy.connect_s + policy.read_s)
    for _ in range(MAX_REDIRECTS + 1):
        scheme, host, port, path = split_url(field, url)
        address = _resolve(field, host, port, policy)
        deadline.phase = "accept a connection"
        connection, sock = _connect(field, scheme, host, address, port, deadline)
        timer = deadline.guard(sock)
        try:
            try:
                deadline.phase = "send its reply's headers"
                # The port is part of the Host header when it is not the scheme's own.
                named = host if port == (443 if scheme == "https" else 80) else f"{host}:{port}"
                connection.request("GET", path, headers={"Host": named, "User-Agent": "omni-cpu"})
                reply = connection.getresponse()
                if deadline.passed:  # cut mid-headers: what came reads as a reply, EOF-ended
                    raise TimeoutError
                if reply.status in (301, 302, 303, 307, 308) and reply.getheader("location"):
                    url = urljoin(url, reply.getheader("location", ""))
                    continue
                deadline.phase = "send the audio"
                return _body(field, host, sock, reply, policy, deadline)
            except (OSError, http.client.HTTPException) as error:  # TimeoutError is an OSError
                if isinstance(error, TimeoutError) or deadline.passed:
                    raise deadline.expired(field, host) from None
                raise BadBody(
                    400, f"{field}: fetching from {host} failed ({error.__class__.__name__})",
                    field, "ref_audio_fetch",
                ) from None  # fmt: skip
        finally:
            if timer is not None:
                timer.cancel()
            connection.close()
            sock.close()
    raise BadBody(
        400, f"{field}: {host} redirects more than {MAX_REDIRECTS} times", field, "ref_audio_fetch"
    )


def _body(
    field: str,
    host: str,
    sock: socket.socket,
    reply: http.client.HTTPResponse,
    policy: UrlPolicy,
    deadline: Deadline,
) -> tuple[bytes, str]:
    if reply.status != 200:
        raise BadBody(
            400, f"{field}: {host} answered {reply.status} {reply.reason}", field, "ref_audio_fetch"
        )
    mime = (reply.getheader("content-type") or "").partition(";")[0].strip().lower()
    if not (mime.startswith("audio/") or mime in GENERIC_TYPES):
        raise BadBody(400, f"{field}: {host} sent {mime}, not audio", field, "ref_audio_fetch")
    declared = reply.getheader("content-length")
    too_big = BadBody(
        400,
        f"{field}: {host} sends more than {policy.max_bytes} bytes (send a shorter clip)",
        field,
        "ref_audio_fetch",
    )
    if declared and declared.isdigit() and policy.max_bytes and int(declared) > policy.max_bytes:
        raise too_big
    chunks: list[bytes] = []
    size = 0
    while True:
        if deadline.passed:
            raise TimeoutError
        sock.settimeout(deadline.left())
        chunk = reply.read1(1 << 16)
        if not chunk:
            if deadline.passed:  # the deadline's timer cut the body short: not the end
                raise TimeoutError
            break
        size += len(chunk)
        if policy.max_bytes and size > policy.max_bytes:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks), mime if mime.startswith("audio/") else "audio/wav"


def as_data_url(data: bytes, mime: str) -> str:
    """The audio as the `data:` URL vLLM-Omni decodes without fetching anything."""
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"
