"""Errors: the service's google.rpc.Status as a Python exception."""

from __future__ import annotations

from typing import Optional

import grpc

from ._gen.google.rpc import status_pb2

_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
_DETAILS_KEY = "grpc-status-details-bin"


class BatcherError(Exception):
    """A request failed: the RPC's status, or the status of its completion.

    ``code`` is a :class:`grpc.StatusCode`; ``message`` the service's text,
    which names the bad field for INVALID_ARGUMENT; ``retry_delay`` the delay
    in seconds of a google.rpc.RetryInfo the service attached (None without
    one); ``completion`` the failed Completion when the service sent one.
    """

    def __init__(self, code: grpc.StatusCode, message: str, *,
                 retry_delay: Optional[float] = None, completion=None):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.retry_delay = retry_delay
        self.completion = completion

    @classmethod
    def from_rpc_error(cls, err: grpc.RpcError) -> "BatcherError":
        """Builds the error from a failed RPC, reading the RetryInfo from the
        grpc-status-details-bin trailer."""
        delay = None
        for key, value in (err.trailing_metadata() or ()):
            if key == _DETAILS_KEY:
                delay = _retry_delay(status_pb2.Status.FromString(value))
        return cls(err.code(), err.details() or "", retry_delay=delay)

    @classmethod
    def from_status(cls, st: status_pb2.Status, completion=None) -> "BatcherError":
        """Builds the error from a google.rpc.Status (a completion's error)."""
        return cls(_code(st.code), st.message, retry_delay=_retry_delay(st),
                   completion=completion)


def _code(value: int) -> grpc.StatusCode:
    for c in grpc.StatusCode:
        if c.value[0] == value:
            return c
    return grpc.StatusCode.UNKNOWN


def _retry_delay(st: status_pb2.Status) -> Optional[float]:
    """The RetryInfo delay in st's details, in seconds, or None.

    RetryInfo is ``message RetryInfo { google.protobuf.Duration retry_delay =
    1; }``; it is decoded here by hand, because Debian ships no
    googleapis-common-protos for Python. A malformed detail is no RetryInfo.
    """
    for any_ in st.details:
        if any_.type_url == _RETRY_INFO:
            try:
                return _retry_info_delay(any_.value)
            except ValueError:
                return None
    return None


def _retry_info_delay(buf: bytes) -> float:
    seconds = nanos = 0
    for field, value in _fields(buf):
        if field == 1 and isinstance(value, bytes):  # retry_delay: a Duration
            seconds = nanos = 0
            for f, v in _fields(value):
                if f == 1 and isinstance(v, int):
                    seconds = _signed(v, 64)
                elif f == 2 and isinstance(v, int):
                    nanos = _signed(v, 64)
    return max(seconds + nanos / 1e9, 0.0)


def _signed(v: int, bits: int) -> int:
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def _fields(buf: bytes):
    """Yields (field number, value) of a protobuf message: an int for a
    varint or fixed field, bytes for a length-delimited one. Raises
    ValueError on malformed input (groups included)."""
    i = 0
    while i < len(buf):
        tag, i = _varint(buf, i)
        field, wire = tag >> 3, tag & 7
        if field == 0:
            raise ValueError("field number 0")
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1 or wire == 5:
            n = 8 if wire == 1 else 4
            if i + n > len(buf):
                raise ValueError("truncated fixed field")
            value, i = int.from_bytes(buf[i:i + n], "little"), i + n
        elif wire == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise ValueError("truncated length-delimited field")
            value, i = buf[i:i + n], i + n
        else:
            raise ValueError(f"wire type {wire}")
        yield field, value


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value & ((1 << 64) - 1), i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")
