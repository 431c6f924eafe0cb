"""Verifying berth's webhook deliveries (docs/notifications.md) in a receiver written in Python.

    from berth.webhooks import verify, SignatureError
    event = verify(secret, headers["X-Berth-Signature"], body)   # raises SignatureError

The signature header is ``t=UNIX,v1=HEX``: HEX is the lowercase hex HMAC-SHA256 of ``UNIX + "." +
body`` under the webhook's secret. ``verify`` recomputes it over the exact bytes received, compares in
constant time, and refuses a timestamp more than ``tolerance`` seconds from now (a body replayed later).
Receivers dedupe by the event's ``id``: berth delivers at least once.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any, Dict, Optional, Union

DEFAULT_TOLERANCE = 300  # seconds

__all__ = ["DEFAULT_TOLERANCE", "SignatureError", "sign", "verify"]


class SignatureError(ValueError):
    """A delivery that is not authentic, or not fresh."""


def _bytes(value: Union[str, bytes]) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else value


def sign(secret: Union[str, bytes], body: Union[str, bytes], unix_seconds: int) -> str:
    """The ``X-Berth-Signature`` value berth sends for ``body`` at ``unix_seconds``."""
    mac = hmac.new(_bytes(secret), f"{unix_seconds}.".encode() + _bytes(body), hashlib.sha256)
    return f"t={unix_seconds},v1={mac.hexdigest()}"


def verify(secret: Union[str, bytes], signature: str, body: Union[str, bytes], *,
           tolerance: float = DEFAULT_TOLERANCE, now: Optional[float] = None) -> Dict[str, Any]:
    """The event of an authentic, fresh delivery; SignatureError otherwise."""
    try:
        parts = dict(item.split("=", 1) for item in signature.split(","))
        t = int(parts["t"])
        received = parts["v1"]
    except (KeyError, ValueError, AttributeError):
        raise SignatureError(f"not a berth signature: {signature!r}") from None
    expected = sign(secret, body, t).split("v1=", 1)[1]
    if not hmac.compare_digest(expected, received):
        raise SignatureError("the signature does not match the body (wrong secret, or altered)")
    age = (time.time() if now is None else now) - t
    if abs(age) > tolerance:
        raise SignatureError(f"signed {age:.0f}s from now, more than {tolerance:.0f}s: a replay?")
    try:
        event = json.loads(_bytes(body).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise SignatureError("the body is not JSON") from None
    if not isinstance(event, dict):
        raise SignatureError("the body is not a JSON object")
    return event
