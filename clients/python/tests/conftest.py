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
def batcherd(tmp_path_factory):
    """Builds cmd/batcherd, starts it on a free port, and yields host:port
    once it listens and its health service says SERVING."""
    exe = tmp_path_factory.mktemp("bin") / "batcherd"
    go = os.environ.get("GO", "go")
    subprocess.run([go, "build", "-o", str(exe), "./cmd/batcherd"], cwd=ROOT, check=True)
    proc = subprocess.Popen([str(exe), "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"],
                            stderr=subprocess.PIPE, text=True)
    addr = None
    for line in proc.stderr:  # JSON log lines; the first says where it listens
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("msg") == "listening":
            addr = rec["addr"]
            break
    if addr is None:
        proc.kill()
        raise RuntimeError(f"batcherd exited ({proc.wait()}) before it listened")
    drain = threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True)
    drain.start()
    with grpc.insecure_channel(addr) as ch:
        # grpc.health.v1.Health/Check with raw bytes (Debian packages no
        # grpcio-health-checking): an empty request; SERVING is field 1 = 1.
        check = ch.unary_unary("/grpc.health.v1.Health/Check",
                               request_serializer=lambda _: b"",
                               response_deserializer=lambda b: b)
        assert check(None, timeout=30, wait_for_ready=True) == b"\x08\x01", "batcherd is not SERVING"
    yield addr
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=30) == 0, "batcherd did not exit cleanly"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        drain.join(timeout=10)
        proc.stderr.close()


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
