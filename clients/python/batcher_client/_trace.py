"""W3C trace context (traceparent) without an OpenTelemetry SDK.

Debian packages no OpenTelemetry for Python, so the client propagates a
traceparent it is given, or makes a new one, by hand: a version-00 header
with a random trace id and parent id, flagged sampled.
"""

from __future__ import annotations

import re
import secrets

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def new_traceparent() -> str:
    """A new W3C traceparent: a fresh trace, sampled."""
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


def check_traceparent(value: str) -> str:
    """Returns value if it is a valid version-00 traceparent, else raises
    ValueError naming the field."""
    m = _TRACEPARENT.match(value)
    if not m or m.group(1) == "0" * 32 or m.group(2) == "0" * 16:
        raise ValueError(f"traceparent: {value!r} is not a W3C version-00 traceparent")
    return value


def trace_id(traceparent: str) -> str:
    """The trace id of a valid traceparent."""
    return check_traceparent(traceparent)[3:35]
