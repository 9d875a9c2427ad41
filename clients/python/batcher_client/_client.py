"""The blocking and asyncio clients, and the stream helper."""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
from typing import Iterator, Optional, Sequence, Tuple, Union

import grpc
from grpc import aio

from ._errors import BatcherError
from ._gen.batcher.v1 import batcher_pb2 as pb
from ._gen.batcher.v1 import batcher_pb2_grpc as pb_grpc
from ._requests import _duration
from ._trace import check_traceparent, new_traceparent

#: How many times submit sends one request, the first time included, while
#: the service answers that it may be retried.
DEFAULT_MAX_ATTEMPTS = 3

#: Flow-control settings of the channels Client and AsyncClient make, ahead
#: of the caller's ``options`` (which override them key by key; pass
#: ``flow_control=False`` for gRPC's defaults). A streamed answer is many
#: small messages (a delta of a few tokens each); on such a stream gRPC's
#: bandwidth-delay-product probe pings the service again and again and
#: costs both sides CPU for nothing, so it is off, and each call's receive
#: window is fixed at 1 MiB, enough for every delta of a 16,000-token answer
#: not yet read. gRPC core sizes the connection's window from its calls'.
#: The Go client's are the same (client.DefaultStreamWindow).
FLOW_CONTROL_OPTIONS = (
    ("grpc.http2.bdp_probe", 0),
    ("grpc.http2.lookahead_bytes", 1 << 20),
)

_RETRIED = (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE)

Metadata = Sequence[Tuple[str, Union[str, bytes]]]
StreamItem = Union[pb.Completion, pb.Event, pb.Rejection, pb.StreamSummary]


class _Settings:
    """What Client and AsyncClient share: retry, deadline and trace rules."""

    def __init__(self, max_attempts: int, timeout: Optional[float], trace: bool):
        if max_attempts < 1:
            raise ValueError(f"max_attempts: must be at least 1, got {max_attempts}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout: must be positive seconds, got {timeout}")
        self.max_attempts = max_attempts
        self.timeout = timeout
        self.trace = trace

    def deadline(self, timeout: Optional[float]) -> Optional[float]:
        t = self.timeout if timeout is None else timeout
        return None if t is None else time.monotonic() + t

    def metadata(self, traceparent: Optional[str], tracestate: Optional[str],
                 metadata: Metadata) -> list:
        md = list(metadata)
        if traceparent is None and self.trace:
            traceparent = new_traceparent()
        if traceparent is not None:
            md.append(("traceparent", check_traceparent(traceparent)))
            if tracestate:
                md.append(("tracestate", tracestate))
        return md

    def retry_after(self, err: BatcherError, attempt: int,
                    deadline: Optional[float]) -> Optional[float]:
        """The wait before the next attempt, or None not to retry: the
        service did not say when (no RetryInfo), the attempts are used up,
        or the wait would outlast the deadline."""
        if err.code not in _RETRIED or err.retry_delay is None or attempt >= self.max_attempts:
            return None
        if deadline is not None and time.monotonic() + err.retry_delay >= deadline:
            return None
        return err.retry_delay


def _channel_options(options: Sequence[tuple], flow_control: bool) -> list:
    """FLOW_CONTROL_OPTIONS (unless flow_control is off), then options; a
    key given twice takes the caller's value."""
    merged = dict(FLOW_CONTROL_OPTIONS) if flow_control else {}
    merged.update(dict(options))
    return list(merged.items())


def _remaining(deadline: Optional[float]) -> Optional[float]:
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


def _completion(resp: pb.SubmitResponse) -> pb.Completion:
    if not resp.HasField("completion"):
        raise BatcherError(grpc.StatusCode.INTERNAL, "Submit response has no completion")
    c = resp.completion
    if c.HasField("error"):
        raise BatcherError.from_status(c.error, completion=c)
    return c


class Client:
    """A blocking client of batcher.v1.BatcherService; safe to share
    between threads.

    ``target`` is host:port. Without ``credentials`` the channel is
    plaintext. ``max_attempts`` bounds how often submit sends a request while
    the service answers RESOURCE_EXHAUSTED or UNAVAILABLE with a RetryInfo (1
    turns retries off). ``timeout`` is the default deadline of each call, in
    seconds, retries and their waits included (None: no deadline). With
    ``trace`` on, a call without a traceparent gets a new one, so that the
    service's spans of it share one trace. ``options`` are gRPC channel
    arguments, after FLOW_CONTROL_OPTIONS (no BDP probe, 1 MiB windows) and
    overriding them; ``flow_control=False`` leaves those out, for gRPC's
    default flow control.
    """

    def __init__(self, target: str, *, credentials: Optional[grpc.ChannelCredentials] = None,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS, timeout: Optional[float] = None,
                 trace: bool = True, options: Sequence[tuple] = (), flow_control: bool = True):
        self._s = _Settings(max_attempts, timeout, trace)
        options = _channel_options(options, flow_control)
        if credentials is None:
            self._channel = grpc.insecure_channel(target, options=options)
        else:
            self._channel = grpc.secure_channel(target, credentials, options=options)
        self._stub = pb_grpc.BatcherServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def submit(self, request: pb.Request, *, timeout: Optional[float] = None,
               traceparent: Optional[str] = None, tracestate: Optional[str] = None,
               metadata: Metadata = ()) -> pb.Completion:
        """Sends one request and returns its completion.

        Raises BatcherError with the service's status: of the RPC, or of the
        completion (then ``err.completion`` is set). Retries as the class
        says, within ``timeout`` seconds (default: the client's)."""
        deadline = self._s.deadline(timeout)
        md = self._s.metadata(traceparent, tracestate, metadata)
        attempt = 0
        while True:
            attempt += 1
            try:
                return _completion(self._stub.Submit(
                    pb.SubmitRequest(request=request), timeout=_remaining(deadline), metadata=md))
            except grpc.RpcError as e:
                err = BatcherError.from_rpc_error(e)
            except BatcherError as e:
                err = e
            delay = self._s.retry_after(err, attempt, deadline)
            if delay is None:
                raise err
            time.sleep(delay)

    def submit_streamed(self, request: pb.Request, *, timeout: Optional[float] = None,
                        traceparent: Optional[str] = None, tracestate: Optional[str] = None,
                        metadata: Metadata = ()) -> Iterator[pb.Delta]:
        """Sends one request streamed (the SubmitStreamed RPC) and yields its
        deltas as the model generates them; ``"".join(d.text for d in ...)``
        is the answer. The iterator's ``completion`` attribute holds the
        Completion once it ended. A failure raises BatcherError: with
        ``err.completion`` set (``partial`` when deltas had come) when the
        request was admitted. Closing the iterator early cancels the request
        and its upstream call. No retries: a streamed answer is not resent."""
        md = self._s.metadata(traceparent, tracestate, metadata)
        call = self._stub.SubmitStreamed(pb.SubmitStreamedRequest(request=request),
                                         timeout=_remaining(self._s.deadline(timeout)), metadata=md)
        return _Streamed(call)

    def stream(self, *, verbosity: int = pb.VERBOSITY_UNSPECIFIED,
               summary_interval: Optional[float] = None, timeout: Optional[float] = None,
               traceparent: Optional[str] = None, tracestate: Optional[str] = None,
               metadata: Metadata = (), max_pending: int = 1024) -> "Stream":
        """Opens a SubmitStream. See Stream."""
        deadline = self._s.deadline(timeout)
        options = None
        if verbosity != pb.VERBOSITY_UNSPECIFIED or summary_interval is not None:
            options = pb.StreamOptions(verbosity=verbosity)
            if summary_interval is not None:
                options.summary_interval.CopyFrom(_duration(summary_interval))
        return Stream(self._stub, options, _remaining(deadline),
                      self._s.metadata(traceparent, tracestate, metadata), max_pending)


class _Streamed:
    """The deltas of one SubmitStreamed call; ``completion`` is set at the end."""

    def __init__(self, call):
        self._call = call
        self.completion: Optional[pb.Completion] = None

    def __iter__(self) -> Iterator[pb.Delta]:
        try:
            for m in self._call:
                if m.HasField("delta"):
                    yield m.delta
                elif m.HasField("completion"):
                    self.completion = m.completion
        except grpc.RpcError as e:
            err = BatcherError.from_rpc_error(e)
            if self.completion is not None and self.completion.HasField("error"):
                err = BatcherError.from_status(self.completion.error, completion=self.completion)
            raise err from None
        finally:
            self._call.cancel()  # a no-op once it ended; else the caller left
        if self.completion is None:
            raise BatcherError(grpc.StatusCode.INTERNAL, "SubmitStreamed ended without a completion")
        if self.completion.HasField("error"):
            raise BatcherError.from_status(self.completion.error, completion=self.completion)


class Stream:
    """Many requests over one SubmitStream.

    ``send`` queues a request (giving it an id when it has none) and returns
    its id; ``cancel`` cancels one request by id; ``flush`` asks the service
    to send what its lanes hold now; ``close`` half-closes: the service then
    answers every accepted request and ends the stream. Iterating yields,
    as they arrive, the service's Completion, Event, Rejection and
    StreamSummary messages, and ends when the stream does; a stream that
    fails raises BatcherError. ``abort`` cancels the whole RPC. A stream does
    not retry: ``BatcherError.from_status(item.error)`` reads a failed
    Completion's or a Rejection's code and RetryInfo delay, to send it again.

    Used as a context manager, the stream is half-closed on a normal exit and
    aborted when an exception leaves the block. ``send`` blocks while
    ``max_pending`` messages wait to be written (gRPC flow control pushes
    back when the service's in-flight window is full).
    """

    def __init__(self, stub, options: Optional[pb.StreamOptions], timeout: Optional[float],
                 metadata: list, max_pending: int):
        self._q: queue.Queue = queue.Queue(maxsize=max_pending)
        self._lock = threading.Lock()
        self._closed = False
        self._aborted = False
        self._ids = itertools.count(1)
        if options is not None:
            self._q.put(pb.SubmitStreamRequest(options=options))
        self._call = stub.SubmitStream(self._messages(), timeout=timeout, metadata=metadata)

    def _messages(self) -> Iterator[pb.SubmitStreamRequest]:
        while True:
            m = self._q.get()
            if m is None:
                return
            yield m

    def _put(self, m: pb.SubmitStreamRequest) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("stream is closed for sending")
        while True:
            try:
                self._q.put(m, timeout=0.1)
                return
            except queue.Full:
                if self._call.done():
                    raise RuntimeError("stream has ended")

    def send(self, request: pb.Request, *, traceparent: Optional[str] = None,
             tracestate: Optional[str] = None) -> str:
        """Queues request and returns its id. A request without an id gets
        one ("r1", "r2", ...); a request's own traceparent, when given,
        continues the caller's trace for that request alone."""
        if not request.id or traceparent is not None:
            r = pb.Request()  # the caller's message is left as it is
            r.CopyFrom(request)
            if not r.id:
                r.id = f"r{next(self._ids)}"
            if traceparent is not None:
                r.traceparent = check_traceparent(traceparent)
                r.tracestate = tracestate or ""
            request = r
        self._put(pb.SubmitStreamRequest(request=request))
        return request.id

    def cancel(self, request_id: str) -> None:
        """Cancels one request; its completion then carries CANCELLED."""
        self._put(pb.SubmitStreamRequest(cancel=pb.Cancel(id=request_id)))

    def flush(self) -> None:
        """Asks the service to dispatch what its lanes hold at once."""
        self._put(pb.SubmitStreamRequest(flush=pb.Flush()))

    def close(self) -> None:
        """Half-closes the stream; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._q.put(None)

    def abort(self) -> None:
        """Cancels the whole stream: unanswered requests get no result."""
        self._aborted = True
        self._call.cancel()
        self._end_messages()

    def _end_messages(self) -> None:
        with self._lock:
            self._closed = True
        try:
            self._q.put_nowait(None)
        except queue.Full:
            pass  # the writer is not waiting for a message

    def __iter__(self) -> Iterator[StreamItem]:
        try:
            for resp in self._call:
                yield getattr(resp, resp.WhichOneof("kind"))
        except grpc.RpcError as e:
            if not (self._aborted and e.code() == grpc.StatusCode.CANCELLED):
                raise BatcherError.from_rpc_error(e) from None
        finally:
            self._end_messages()

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class AsyncClient:
    """The asyncio twin of Client (grpc.aio), with the same retry, deadline
    and trace rules. Create and use it inside one event loop."""

    def __init__(self, target: str, *, credentials: Optional[grpc.ChannelCredentials] = None,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS, timeout: Optional[float] = None,
                 trace: bool = True, options: Sequence[tuple] = (), flow_control: bool = True):
        self._s = _Settings(max_attempts, timeout, trace)
        options = _channel_options(options, flow_control)
        if credentials is None:
            self._channel = aio.insecure_channel(target, options=options)
        else:
            self._channel = aio.secure_channel(target, credentials, options=options)
        self._stub = pb_grpc.BatcherServiceStub(self._channel)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def submit(self, request: pb.Request, *, timeout: Optional[float] = None,
                     traceparent: Optional[str] = None, tracestate: Optional[str] = None,
                     metadata: Metadata = ()) -> pb.Completion:
        """As Client.submit."""
        deadline = self._s.deadline(timeout)
        md = self._s.metadata(traceparent, tracestate, metadata)
        attempt = 0
        while True:
            attempt += 1
            try:
                return _completion(await self._stub.Submit(
                    pb.SubmitRequest(request=request), timeout=_remaining(deadline), metadata=md))
            except grpc.RpcError as e:
                err = BatcherError.from_rpc_error(e)
            except BatcherError as e:
                err = e
            delay = self._s.retry_after(err, attempt, deadline)
            if delay is None:
                raise err
            await asyncio.sleep(delay)
