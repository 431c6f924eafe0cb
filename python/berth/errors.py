"""The exceptions berth's Python client raises.

Every error is a :class:`BerthError`. What the server refused is an :class:`ApiError` carrying the
HTTP status and the server's own ``{"error": ...}`` text unchanged; what went wrong on the way (no
server, a broken connection, a certificate that is not the pinned one) is a :class:`ConnectionError`,
which is also Python's built-in ``ConnectionError``. Arguments the client refuses before sending
anything are plain ``ValueError`` / ``TypeError``.
"""

from __future__ import annotations

import builtins
from typing import Any, Dict, Optional


class BerthError(Exception):
    """Base of every error raised by the berth client."""

    #: Set on errors of a submission: the Idempotency-Key it was sent with. Submitting again with
    #: ``idempotency_key=`` this key never submits twice.
    idempotency_key: Optional[str] = None
    #: Set on errors of a submission: ``False`` when no server was reached at all (nothing was
    #: submitted), ``True`` when it may or may not have been recorded, ``None`` when not a submission.
    maybe_recorded: Optional[bool] = None
    #: What the client adds to the message (how to find out what became of a submission).
    hint: str = ""

    def __str__(self) -> str:
        text = super().__str__()
        return text + ("\n" + self.hint if self.hint else "")


class ConfigError(BerthError):
    """No server could be found, or the configuration is unusable (a bad URL, a token that would
    travel over plain HTTP off this machine)."""


class ConnectionError(BerthError, builtins.ConnectionError):  # noqa: A001 - deliberately shadows
    """The server could not be reached, or the connection broke before its answer arrived.

    ``url`` is the server tried; ``sent`` is False when the request surely never left (the
    connection could not be made) and True when it may have reached the server.
    """

    def __init__(self, message: str, url: str = "", sent: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.url = url
        self.sent = sent


class TlsError(ConnectionError):
    """The server's TLS certificate is not the pinned one (or not trusted). Never retried."""


class ApiError(BerthError):
    """The server answered with an error status (4xx/5xx).

    ``status`` is the HTTP status, ``message`` the server's ``error`` text exactly as it sent it
    (or, when whatever answered was not a berth server, a sentence saying so), ``body`` the decoded
    JSON answer when there was one, ``headers`` the answer's headers.
    """

    def __init__(self, status: int, message: str, *, method: str = "", path: str = "",
                 body: Optional[Dict[str, Any]] = None,
                 headers: Optional[Dict[str, str]] = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.method = method
        self.path = path
        self.body = body
        self.headers = dict(headers or {})


class BadRequestError(ApiError):
    """400: the server refused the request's content (the message says what is wrong)."""


class UnauthorizedError(ApiError):
    """401: the server does not know who you are (no token, or an unknown, revoked or expired one)."""


class ForbiddenError(ApiError):
    """403: you may not do that (the message names the right you lack)."""


class NotFoundError(ApiError):
    """404: no such job, group, node or endpoint."""


class ConflictError(ApiError):
    """409: a conflict (a job already queued, an idempotency key used for another submission...)."""


class InfeasibleError(ApiError):
    """422: a job that can never run on this cluster."""


class UnavailableError(ApiError):
    """5xx: the server could not do it now (busy, its store failed, a follower without a leader)."""


_BY_STATUS = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    422: InfeasibleError,
}


def api_error_class(status: int) -> type:
    """The ApiError subclass for an HTTP status."""
    if status >= 500:
        return UnavailableError
    return _BY_STATUS.get(status, ApiError)


class WaitTimeout(BerthError, TimeoutError):
    """``wait()`` ran out of time before every job ended.

    ``result`` is what was known when it gave up (a :class:`berth.WaitResult`); the jobs go on.
    """

    def __init__(self, message: str, result: Any = None) -> None:
        super().__init__(message)
        self.result = result


class BerthWarning(UserWarning):
    """What the server wants a submitter to know (ignored task-file fields, limits not enforced)."""
