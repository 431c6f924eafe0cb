"""HTTP/1.1 to a berth server, as the ``berth`` command line speaks it, with the standard library only.

Server URLs are those the CLI takes: ``http://HOST:PORT[/prefix]``, ``https://HOST[:PORT][/prefix]``,
``unix:/path/to/berth.sock`` (HTTP over a unix socket, where the kernel tells the server who you are)
and ``HOST:PORT``. A comma-separated list names several servers of one cluster (docs/ha.md).

TLS: with a pinned fingerprint (``sha256:<hex>``, what ``berth login`` saves) the server's leaf
certificate must have exactly that SHA-256 fingerprint and nothing else is checked (the CLI's trust on
first use); without one the chain and host name are verified against the system's CAs.

Retries (:class:`Retry`) follow one rule: a request is sent again only when that cannot do anything
twice. A request that surely never left (the connection could not be made) may always go again, to
this server or the next. Beyond that, reads and cancels (``SAFE``) and submissions carrying an
Idempotency-Key (``KEYED``) are sent again when the connection broke or the server answered 502, 503
or 504; other changes (``ONCE``) only when the server said it did nothing (a 503 with Retry-After, or a
follower's 503 naming its leader); and a submission without a key (``NEVER``) never, once it may have
reached a server. Retry-After is honoured; retrying stops after ``retry_for`` seconds (15, as the CLI's
failover wait) and says so on the ``berth`` logger after the first second.
"""

from __future__ import annotations

import enum
import hashlib
import http.client
import ipaddress
import logging
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from .errors import BerthError, ConfigError, ConnectionError, TlsError

log = logging.getLogger("berth")

USER_AGENT = "berth-python"
DEFAULT_TIMEOUT = 60.0
DEFAULT_RETRY_FOR = 15.0  # the CLI's kFailoverWaitMs
ANNOUNCE_AFTER = 1.0  # the CLI's kAnnounceWaitMs
MAX_UNIX_PATH = 107  # sizeof(sockaddr_un.sun_path) - 1


class Retry(enum.Enum):
    """How a request may be repeated (see the module's docstring)."""

    SAFE = "safe"
    KEYED = "keyed"
    ONCE = "once"
    NEVER = "never"


@dataclass(frozen=True)
class ServerUrl:
    """One parsed server URL."""

    text: str
    scheme: str  # "http", "https" or "unix"
    host: str = ""
    port: int = 0
    base_path: str = ""
    socket_path: str = ""


def parse_url(url: str) -> ServerUrl:
    """Parses a server URL as the CLI does (net::ParseUrl); ConfigError naming the problem."""
    if url.startswith("unix:"):
        path = url[5:]
        if path.startswith("//"):
            path = path[2:]
        if not path.startswith("/"):
            raise ConfigError(f"bad server URL '{url}': a unix socket URL names an absolute path, "
                              "as in unix:/run/berth/berth.sock")
        if len(path.encode()) > MAX_UNIX_PATH:
            raise ConfigError(f"bad server URL '{url}': the socket path is longer than "
                              f"{MAX_UNIX_PATH} bytes")
        return ServerUrl(text=url, scheme="unix", socket_path=path)
    scheme, rest = "http", url
    if "://" in url:
        scheme, rest = url.split("://", 1)
        scheme = scheme.lower()
        if scheme not in ("http", "https"):
            raise ConfigError(f"unknown scheme '{url.split('://', 1)[0]}' in server URL '{url}' "
                              "(expected http://HOST:PORT, https://HOST:PORT or unix:/path/to/socket)")
    port = 443 if scheme == "https" else 80
    base_path = ""
    if "/" in rest:
        rest, base_path = rest.split("/", 1)
        base_path = ("/" + base_path).rstrip("/")
    port_text = ""
    if rest.startswith("["):
        close = rest.find("]")
        if close < 0:
            raise ConfigError(f"bad server URL '{url}': unclosed '[' in the host")
        host, after = rest[1:close], rest[close + 1:]
        if after:
            if not after.startswith(":"):
                raise ConfigError(f"bad server URL '{url}'")
            port_text = after[1:]
    elif ":" in rest:
        host, port_text = rest.rsplit(":", 1)
    else:
        host = rest
    if port_text:
        if not port_text.isdigit():
            raise ConfigError(f"bad port in server URL '{url}'")
        port = int(port_text)
    if not host or not 0 < port <= 65535:
        raise ConfigError(f"bad server URL '{url}' (expected {scheme}://HOST:PORT)")
    return ServerUrl(text=url, scheme=scheme, host=host, port=port, base_path=base_path)


def is_loopback_host(host: str) -> bool:
    """Whether `host` names only this machine: localhost, ::1 or a dotted 127.x.y.z address."""
    if host in ("localhost", "::1"):
        return True
    try:
        address = ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return address.is_loopback


def normalize_fingerprint(text: str) -> str:
    """``sha256:<64 lowercase hex>`` for any spelling the CLI accepts (upper case, colons, the
    ``SHA256 Fingerprint=`` of openssl), or "" when `text` is not a SHA-256 fingerprint."""
    s = "".join(text.split()).lower()
    for prefix in ("sha256fingerprint=", "sha256:", "sha256="):
        if s.startswith(prefix):
            s = s[len(prefix):]
            break
    hex_digits = s.replace(":", "")
    if len(hex_digits) != 64 or any(c not in "0123456789abcdef" for c in hex_digits):
        return ""
    return "sha256:" + hex_digits


def fingerprint_of_der(der: bytes) -> str:
    """The fingerprint of a DER-encoded certificate, as berth writes it."""
    return "sha256:" + hashlib.sha256(der).hexdigest()


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a unix socket (the server's or a node agent's ``berth.sock``)."""

    def __init__(self, socket_path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS that trusts exactly one certificate: the one whose SHA-256 fingerprint is pinned.

    The handshake verifies nothing (CERT_NONE); the certificate the server presented is then hashed
    and compared with the pin, before any byte of the request is sent.
    """

    def __init__(self, host: str, port: int, pin: str, timeout: float) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        super().__init__(host, port, timeout=timeout, context=context)
        self.pin = pin

    def connect(self) -> None:
        super().connect()
        der = self.sock.getpeercert(binary_form=True) if self.sock else None
        got = fingerprint_of_der(der) if der else ""
        if got != self.pin:
            self.close()
            where = f"{self.host}:{self.port}"
            if not got:
                raise TlsError(f"{where} presented no TLS certificate", url=where)
            raise TlsError(
                f"TLS certificate fingerprint mismatch for {where}: expected {self.pin}, got {got} "
                "(the server's certificate changed, or another machine answers at this address; "
                "check with the server's admin before trusting the new fingerprint)", url=where)


@dataclass
class Response:
    """A server's answer: status, headers (names lower-cased), body bytes, and which server."""

    status: int
    headers: Dict[str, str]
    body: bytes
    url: str = ""

    def header(self, name: str) -> str:
        """The value of header `name` (any case), "" when absent."""
        return self.headers.get(name.lower(), "")


class _NeverSent(Exception):
    """The connection could not be made: the request did not leave this machine."""

    def __init__(self, error: ConnectionError) -> None:
        super().__init__(str(error))
        self.error = error


class _Lost(Exception):
    """The request may have reached the server, but its answer did not arrive."""

    def __init__(self, error: ConnectionError, stale: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.stale = stale  # on a kept-alive connection the server may have closed meanwhile


@dataclass
class _Attempts:
    """What a request's attempts so far amount to."""

    started: float = field(default_factory=time.monotonic)
    count: int = 0
    delivered: bool = False  # some attempt may have reached a server
    announced: bool = False


class Transport:
    """Sends requests to one cluster's server(s), keeping one connection per thread and server.

    Thread-safe: each thread has its own connections.
    """

    def __init__(self, urls: List[str], token: str = "", tls_fingerprint: str = "",
                 timeout: float = DEFAULT_TIMEOUT, retry_for: float = DEFAULT_RETRY_FOR) -> None:
        if not urls:
            raise ConfigError("no server URL given")
        self.servers = [parse_url(u) for u in urls]
        self.token = token
        self.pin = ""
        if tls_fingerprint:
            self.pin = normalize_fingerprint(tls_fingerprint)
            if not self.pin:
                raise ConfigError(f"bad TLS fingerprint '{tls_fingerprint}' "
                                  "(expected sha256: and 64 hex digits)")
        self.timeout = timeout
        self.retry_for = retry_for
        self._current = 0  # index into servers of the one in use
        self._local = threading.local()
        self._lock = threading.Lock()
        self._every: List[Dict[str, http.client.HTTPConnection]] = []  # each thread's connections
        # Called with (server, error) when a server could not be reached: may return an error to
        # raise at once instead of trying again (the local cluster that is not running).
        self.on_unreachable: Optional[Callable[[ServerUrl, ConnectionError],
                                               Optional[ConnectionError]]] = None

    @property
    def url(self) -> str:
        """The server in use."""
        return self.servers[self._current].text

    # --- connections ---

    def _connections(self) -> Dict[str, http.client.HTTPConnection]:
        conns = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
            with self._lock:
                self._every.append(conns)
        return conns

    def _new_connection(self, server: ServerUrl, timeout: float) -> http.client.HTTPConnection:
        if server.scheme == "unix":
            return UnixHTTPConnection(server.socket_path, timeout)
        if server.scheme == "https":
            if self.pin:
                return PinnedHTTPSConnection(server.host, server.port, self.pin, timeout)
            return http.client.HTTPSConnection(server.host, server.port, timeout=timeout,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(server.host, server.port, timeout=timeout)

    def close(self) -> None:
        """Closes the connections of every thread (a later request opens a new one)."""
        with self._lock:
            every = list(self._every)
        for conns in every:
            for conn in list(conns.values()):
                conn.close()
            conns.clear()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit anything may be gone
            pass

    def _drop(self, server: ServerUrl) -> None:
        conn = self._connections().pop(server.text, None)
        if conn is not None:
            conn.close()

    def _connect(self, server: ServerUrl, timeout: float,
                 fresh: bool) -> Tuple[http.client.HTTPConnection, bool]:
        """The connection to `server` (made now if needed, or always with `fresh`) and whether it
        was kept alive from an earlier request. Raises _NeverSent when it cannot be made."""
        conns = self._connections()
        if fresh:
            self._drop(server)
        conn = conns.get(server.text)
        if conn is not None and conn.sock is not None:
            conn.timeout = timeout
            conn.sock.settimeout(timeout)
            return conn, True
        conn = self._new_connection(server, timeout)
        try:
            conn.connect()
        except TlsError:
            raise
        except ssl.SSLCertVerificationError as e:
            raise TlsError(f"the TLS certificate of {_where(server)} is not trusted: "
                           f"{e.verify_message} (pin the certificate's fingerprint: berth login, "
                           "BERTH_TLS_FINGERPRINT or tls_fingerprint=)", url=server.text) from e
        except ssl.SSLError as e:
            raise ConnectionError(f"the TLS handshake with {_where(server)} failed: {e.reason or e} "
                                  "(is it a berth server speaking TLS?)", url=server.text) from e
        except socket.gaierror as e:
            raise _NeverSent(ConnectionError(f"cannot resolve {server.host}: {e.strerror or e}",
                                             url=server.text)) from e
        except OSError as e:
            why = "timed out" if isinstance(e, socket.timeout) else (e.strerror or str(e))
            raise _NeverSent(ConnectionError(f"cannot connect to berth server at {server.text}: "
                                             f"{why}", url=server.text)) from e
        conns[server.text] = conn
        return conn, False

    def _exchange(self, server: ServerUrl, method: str, target: str, body: Optional[bytes],
                  headers: Mapping[str, str], timeout: float, fresh: bool) -> Response:
        """One request and its whole answer; _NeverSent or _Lost when it fails."""
        conn, reused = self._connect(server, timeout, fresh)
        try:
            conn.request(method, server.base_path + target, body=body, headers=dict(headers))
            answer = conn.getresponse()
            data = answer.read()
        except (OSError, http.client.HTTPException) as e:
            self._drop(server)
            stale = reused and isinstance(e, (http.client.RemoteDisconnected, BrokenPipeError,
                                              ConnectionResetError, ConnectionAbortedError))
            if isinstance(e, socket.timeout):
                why = f"berth server did not answer {method} {target} within {timeout:g}s"
            elif isinstance(e, http.client.RemoteDisconnected):
                why = f"berth server at {server.text} closed the connection before answering"
            else:
                why = f"reading from berth server at {server.text}: {e}"
            raise _Lost(ConnectionError(why, url=server.text, sent=True), stale) from e
        result = Response(status=answer.status,
                          headers={k.lower(): v for k, v in answer.getheaders()},
                          body=data, url=server.text)
        if answer.will_close:
            self._drop(server)
        return result

    # --- requests ---

    def headers_for(self, body: Optional[bytes], extra: Optional[Mapping[str, str]]) -> Dict[str, str]:
        """The headers every request carries, and `extra`."""
        headers = {"User-Agent": USER_AGENT}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        if body:
            headers["Content-Type"] = "application/json"
        headers.update(extra or {})
        return headers

    def request(self, method: str, target: str, body: Optional[bytes] = None, *,
                headers: Optional[Mapping[str, str]] = None, retry: Retry = Retry.SAFE,
                timeout: Optional[float] = None) -> Response:
        """Sends one request (again, as `retry` allows) and returns the server's answer, whatever
        its status. Raises ConnectionError (TlsError) when no answer could be had; for a KEYED
        request the error says whether the submission may have been recorded."""
        timeout = self.timeout if timeout is None else timeout
        all_headers = self.headers_for(body, headers)
        tries = _Attempts()
        # A change that may not be repeated goes on a connection of its own: a kept-alive one the
        # server closed meanwhile would fail it after it may have been read.
        fresh = retry in (Retry.ONCE, Retry.NEVER)
        while True:
            server = self.servers[self._current]
            tries.count += 1
            try:
                res = self._exchange(server, method, target, body, all_headers, timeout, fresh)
            except _NeverSent as e:
                replacement = self.on_unreachable(server, e.error) if self.on_unreachable else None
                if replacement is not None:
                    raise self._give_up(replacement, tries, retry, all_headers) from None
                if not self._again(tries, e.error, None, server, switch=True):
                    raise self._give_up(e.error, tries, retry, all_headers) from None
                continue
            except _Lost as e:
                tries.delivered = True
                if e.stale and retry in (Retry.SAFE, Retry.KEYED) and tries.count == 1:
                    continue  # a kept-alive connection the server had closed: once more, at once
                if retry not in (Retry.SAFE, Retry.KEYED) or not self._again(
                        tries, e.error, None, server, switch=len(self.servers) > 1):
                    raise self._give_up(e.error, tries, retry, all_headers) from None
                continue
            except ConnectionError as e:  # TLS: a certificate not trusted, a failed handshake
                raise self._give_up(e, tries, retry, all_headers) from None
            tries.delivered = True
            why = _why_again(res, retry)
            if why is None:
                return res
            if not self._again(tries, why, res, server, switch=why.startswith("follower")):
                return res

    def _again(self, tries: _Attempts, why: object, res: Optional[Response], server: ServerUrl,
               switch: bool) -> bool:
        """Waits before the next try and returns True, or False when the time for retries is up.
        `switch` moves on to the next server (or the leader a follower named)."""
        now = time.monotonic()
        left = tries.started + self.retry_for - now
        if left <= 0:
            return False
        if not tries.announced and now - tries.started >= ANNOUNCE_AFTER:
            tries.announced = True
            what = f"{server.text} answered {res.status}" if res is not None else str(why)
            log.warning("berth: %s; trying again for up to %d s", what, int(left + 0.999))
        delay = min(0.1 * (2 ** min(tries.count - 1, 4)), 1.0)
        if res is not None:
            delay = _retry_after(res, delay)
        if switch and len(self.servers) > 1:
            leader = res.header("X-Berth-Leader") if res is not None else ""
            names = [s.text for s in self.servers]
            self._current = names.index(leader) if leader in names else (
                (self._current + 1) % len(self.servers))
            # Once around the list without an answer: a failover is under way; wait a little.
            delay = 0.3 if tries.count % len(self.servers) == 0 else 0.0
            if res is not None and res.header("Retry-After"):
                delay = _retry_after(res, delay)
        time.sleep(max(0.0, min(delay, left)))
        return True

    def _give_up(self, error: ConnectionError, tries: _Attempts, retry: Retry,
                 headers: Mapping[str, str]) -> ConnectionError:
        """The error to raise after the last try; a keyed submission's says what became of it."""
        if retry is Retry.KEYED:
            mark_submission_error(error, headers.get("Idempotency-Key", ""), tries.delivered)
        return error


def mark_submission_error(error: BerthError, key: str, maybe_recorded: bool) -> None:
    """Adds to a failed keyed submission's error its key and whether it may have been recorded,
    with the CLI's advice."""
    error.idempotency_key = key
    error.maybe_recorded = maybe_recorded
    if maybe_recorded:
        error.hint = (f"berth: it may or may not have been recorded; submitting again with "
                      f"idempotency_key='{key}' finds out (it never submits twice)")
    else:
        error.hint = (f"berth: nothing was submitted (no server was reached); submitting again "
                      f"with idempotency_key='{key}' is safe (it never submits twice)")


def _where(server: ServerUrl) -> str:
    return server.socket_path if server.scheme == "unix" else f"{server.host}:{server.port}"


def _why_again(res: Response, retry: Retry) -> Optional[str]:
    """Why an answer is worth asking again for (None: it is the answer)."""
    if res.status not in (502, 503, 504) or retry is Retry.NEVER:
        return None
    if res.status == 503:
        if res.header("X-Berth-Leader"):
            return "follower: " + res.header("X-Berth-Leader")
        if res.header("Retry-After"):
            return "busy"
        if b"no longer leads" in res.body:
            return "fenced"
    if retry in (Retry.SAFE, Retry.KEYED):
        return f"answered {res.status}"
    return None


def _retry_after(res: Response, default: float) -> float:
    """Seconds the answer's Retry-After asks for (an integer; a date counts as 1 s)."""
    value = res.header("Retry-After").strip()
    if not value:
        return default
    try:
        return max(0.0, float(int(value)))
    except ValueError:
        return 1.0
