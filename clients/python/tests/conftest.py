"""Fixtures: a real batcherd, built from this checkout, and a scripted
in-process fake of the service for the cases batcherd cannot be made to
produce on demand (RetryInfo answers, metadata capture)."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from concurrent import futures

import grpc
import pytest
from google.protobuf import duration_pb2

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "clients" / "python"))

from batcher_client import pb, pb_grpc  # noqa: E402
from batcher_client._gen.google.rpc import status_pb2  # noqa: E402


@pytest.fixture(scope="session")
def batcherd_exe(tmp_path_factory):
    """Builds cmd/batcherd once for the session and returns its path."""
    exe = tmp_path_factory.mktemp("bin") / "batcherd"
    go = os.environ.get("GO", "go")
    subprocess.run([go, "build", "-o", str(exe), "./cmd/batcherd"], cwd=ROOT, check=True)
    return exe


class Daemon:
    """A running batcherd: its gRPC address, and stop() to end it with
    SIGTERM and check that it exited 0."""

    def __init__(self, exe, *args):
        self.proc = subprocess.Popen([str(exe), "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
                                      "--http-listen", "127.0.0.1:0", *args], stderr=subprocess.PIPE, text=True)
        self.addr = None
        self.log = []
        for line in self.proc.stderr:  # JSON log lines; "listening" says where
            self.log.append(line)
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("msg") == "listening":
                self.addr = rec["addr"]
                break
        if self.addr is None:
            self.proc.kill()
            raise RuntimeError(f"batcherd exited ({self.proc.wait()}) before it listened:\n{''.join(self.log)}")
        self.drain = threading.Thread(target=lambda: [self.log.append(x) for x in self.proc.stderr], daemon=True)
        self.drain.start()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            assert self.proc.wait(timeout=30) == 0, "batcherd did not exit cleanly"
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.drain.join(timeout=10)
            self.proc.stderr.close()


def wait_serving(channel):
    """Waits until grpc.health.v1.Health/Check answers SERVING, with raw
    bytes (Debian packages no grpcio-health-checking): an empty request;
    SERVING is field 1 = 1. Health checks need no credentials."""
    check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                request_serializer=lambda _: b"",
                                response_deserializer=lambda b: b)
    assert check(None, timeout=30, wait_for_ready=True) == b"\x08\x01", "batcherd is not SERVING"


@pytest.fixture(scope="session")
def batcherd(batcherd_exe):
    """Starts batcherd on a free port, and yields host:port once it
    listens and its health service says SERVING."""
    d = Daemon(batcherd_exe)
    with grpc.insecure_channel(d.addr) as ch:
        wait_serving(ch)
    yield d.addr
    d.stop()


def retry_info(seconds: float) -> bytes:
    """A serialized google.rpc.RetryInfo{retry_delay: seconds}."""
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    raw = d.SerializeToString()
    return bytes([0x0A, len(raw)]) + raw


def status_with_retry(code: grpc.StatusCode, message: str, delay: float) -> status_pb2.Status:
    st = status_pb2.Status(code=code.value[0], message=message)
    any_ = st.details.add()
    any_.type_url = "type.googleapis.com/google.rpc.RetryInfo"
    any_.value = retry_info(delay)
    return st


class Fake(pb_grpc.BatcherServiceServicer):
    """Answers the i-th Submit with answers[i] (the last one repeats), and
    records each call's time and metadata. An answer is a Completion, or a
    google.rpc.Status to fail the RPC with (its details in the trailer)."""

    def __init__(self):
        self.answers = []
        self.calls = []  # (monotonic time, metadata dict)
        self.lock = threading.Lock()

    def Submit(self, request, context):
        with self.lock:
            self.calls.append((time.monotonic(), dict(context.invocation_metadata())))
            answer = self.answers[min(len(self.calls), len(self.answers)) - 1]
        if isinstance(answer, status_pb2.Status):
            context.set_trailing_metadata((("grpc-status-details-bin", answer.SerializeToString()),))
            code = next(c for c in grpc.StatusCode if c.value[0] == answer.code)
            context.abort(code, answer.message)
        return pb.SubmitResponse(completion=answer)

    def SubmitStream(self, request_iterator, context):
        """Answers each request at once with a completion whose text is the
        request's traceparent."""
        with self.lock:
            self.calls.append((0.0, dict(context.invocation_metadata())))
        for m in request_iterator:
            if m.WhichOneof("kind") == "request":
                yield pb.SubmitStreamResponse(completion=pb.Completion(
                    id=m.request.id, text=m.request.traceparent))


@pytest.fixture
def fake():
    """Yields (Fake, host:port) of an in-process scripted service."""
    f = Fake()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_BatcherServiceServicer_to_server(f, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f, f"127.0.0.1:{port}"
    server.stop(grace=None).wait()
