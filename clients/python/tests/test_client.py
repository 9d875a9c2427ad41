"""Retries, deadlines and trace propagation, against a scripted fake."""

from __future__ import annotations

import asyncio
import re

import grpc
import pytest
from grpc import aio

import batcher_client as bc
from batcher_client import pb
from batcher_client._errors import _retry_delay
from batcher_client._gen.google.rpc import status_pb2
from conftest import status_with_retry

OK = pb.Completion(id="x", text="done")


def test_retries_resource_exhausted_after_its_delay(fake):
    f, addr = fake
    f.answers = [status_with_retry(grpc.StatusCode.RESOURCE_EXHAUSTED, "queue full", 0.05), OK]
    with bc.Client(addr, timeout=10) as c:
        assert c.submit(bc.complete("m", "p")).text == "done"
    assert len(f.calls) == 2
    assert f.calls[1][0] - f.calls[0][0] >= 0.05


def test_retries_unavailable_completion(fake):
    f, addr = fake
    failed = pb.Completion(id="x", error=status_with_retry(grpc.StatusCode.UNAVAILABLE, "no backend", 0.01))
    f.answers = [failed, failed, OK]
    with bc.Client(addr, timeout=10) as c:
        assert c.submit(bc.complete("m", "p")).text == "done"
    assert len(f.calls) == 3


@pytest.mark.parametrize("max_attempts", [1, 2, 4])
def test_attempts_are_bounded(fake, max_attempts):
    f, addr = fake
    f.answers = [status_with_retry(grpc.StatusCode.RESOURCE_EXHAUSTED, "queue full", 0)]
    with bc.Client(addr, max_attempts=max_attempts) as c:
        with pytest.raises(bc.BatcherError) as info:
            c.submit(bc.complete("m", "p"))
    assert info.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert info.value.retry_delay == 0
    assert len(f.calls) == max_attempts


def test_no_retry_without_retry_info(fake):
    f, addr = fake
    f.answers = [status_pb2.Status(code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], message="full"), OK]
    with bc.Client(addr) as c:
        with pytest.raises(bc.BatcherError) as info:
            c.submit(bc.complete("m", "p"))
    assert info.value.retry_delay is None
    assert len(f.calls) == 1


def test_no_retry_of_other_codes(fake):
    f, addr = fake
    f.answers = [status_with_retry(grpc.StatusCode.INTERNAL, "boom", 0), OK]
    with bc.Client(addr) as c:
        with pytest.raises(bc.BatcherError) as info:
            c.submit(bc.complete("m", "p"))
    assert info.value.code == grpc.StatusCode.INTERNAL
    assert len(f.calls) == 1


def test_no_wait_past_the_deadline(fake):
    f, addr = fake
    f.answers = [status_with_retry(grpc.StatusCode.RESOURCE_EXHAUSTED, "queue full", 3600), OK]
    with bc.Client(addr) as c:
        with pytest.raises(bc.BatcherError) as info:
            c.submit(bc.complete("m", "p"), timeout=10)
    assert info.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert info.value.retry_delay == 3600
    assert len(f.calls) == 1


def test_async_retries(fake):
    f, addr = fake
    f.answers = [status_with_retry(grpc.StatusCode.RESOURCE_EXHAUSTED, "queue full", 0.01), OK]

    async def main():
        async with bc.AsyncClient(addr, timeout=10) as c:
            return await c.submit(bc.complete("m", "p"))

    assert asyncio.run(main()).text == "done"
    assert len(f.calls) == 2


def test_traceparent_generated(fake):
    f, addr = fake
    f.answers = [OK]
    with bc.Client(addr) as c:
        c.submit(bc.complete("m", "p"))
        c.submit(bc.complete("m", "p"))
    tps = [md["traceparent"] for _, md in f.calls]
    assert all(re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", tp) for tp in tps)
    assert tps[0] != tps[1]


def test_traceparent_propagated(fake):
    f, addr = fake
    f.answers = [OK]
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with bc.Client(addr) as c:
        c.submit(bc.complete("m", "p"), traceparent=tp, tracestate="k=v")
    md = f.calls[0][1]
    assert md["traceparent"] == tp and md["tracestate"] == "k=v"


def test_trace_off(fake):
    f, addr = fake
    f.answers = [OK]
    with bc.Client(addr, trace=False) as c:
        c.submit(bc.complete("m", "p"))
    assert "traceparent" not in f.calls[0][1]


def test_bad_traceparent_names_the_field(fake):
    _, addr = fake
    with bc.Client(addr) as c:
        with pytest.raises(ValueError, match="traceparent"):
            c.submit(bc.complete("m", "p"), traceparent="00-zz-01")


def test_bad_settings_name_the_field():
    with pytest.raises(ValueError, match="max_attempts"):
        bc.Client("127.0.0.1:1", max_attempts=0)
    with pytest.raises(ValueError, match="timeout"):
        bc.Client("127.0.0.1:1", timeout=-1)


@pytest.mark.parametrize("value", [b"", b"\x0a", b"\x0a\x05\x08", b"\xff\xff\xff", b"\x0b\x00", b"\x0a\x02\x08\xff"])
def test_malformed_retry_info_is_ignored(value):
    st = status_pb2.Status(code=8)
    any_ = st.details.add()
    any_.type_url = "type.googleapis.com/google.rpc.RetryInfo"
    any_.value = value
    assert _retry_delay(st) in (None, 0.0)


def test_request_builders():
    r = bc.chat("sim-chat", ("system", "s"), "u", id="a", priority=pb.PRIORITY_HIGH, max_tokens=3,
                temperature=0.5, top_p=0.9, stop=["\n"], seed=7, request_timeout=1.5,
                metadata={"k": "v"}, dedup=pb.DEDUP_OFF)
    assert [(m.role, m.content) for m in r.chat.messages] == [("system", "s"), ("user", "u")]
    assert (r.id, r.priority, r.dedup) == ("a", pb.PRIORITY_HIGH, pb.DEDUP_OFF)
    assert (r.params.max_tokens, r.params.temperature, r.params.seed) == (3, 0.5, 7)
    assert r.timeout.ToMilliseconds() == 1500 and r.metadata["k"] == "v"
    assert not bc.embed("sim-embed", "t").HasField("params")


def test_stream_ids_and_traceparent(fake):
    f, addr = fake
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    req = bc.complete("m", "p")
    with bc.Client(addr, timeout=10) as c:
        with c.stream() as s:
            assert s.send(req) == "r1"
            assert s.send(req, traceparent=tp) == "r2"
            assert s.send(bc.complete("m", "p", id="mine")) == "mine"
            s.close()
            got = {i.id: i.text for i in s}
    assert got == {"r1": "", "r2": tp, "mine": ""}
    assert req.id == "" and req.traceparent == "", "send changed the caller's request"
    assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", f.calls[0][1]["traceparent"])


def test_retry_info_decoder_never_raises():
    """The hand-written RetryInfo decoder reads bytes from the wire: random
    and mutated inputs give a delay or None, never an exception."""
    import random

    rnd = random.Random(1)
    from conftest import retry_info

    seeds = [retry_info(1.5), retry_info(0), b"\x0a\x00", b""]
    for i in range(3000):
        if i % 2:
            buf = bytes(rnd.randrange(256) for _ in range(rnd.randrange(16)))
        else:
            buf = bytearray(rnd.choice(seeds))
            for _ in range(rnd.randrange(1, 4)):
                if buf:
                    buf[rnd.randrange(len(buf))] = rnd.randrange(256)
            buf = bytes(buf)
        st = status_pb2.Status(code=8)
        any_ = st.details.add()
        any_.type_url = "type.googleapis.com/google.rpc.RetryInfo"
        any_.value = buf
        d = _retry_delay(st)
        assert d is None or d >= 0, (buf, d)
    st = status_pb2.Status(code=8)
    st.details.add(type_url="type.googleapis.com/google.rpc.RetryInfo", value=retry_info(1.5))
    assert _retry_delay(st) == 1.5


def test_retry_info_decoder_agrees_with_protobuf():
    import random

    from google.protobuf import duration_pb2

    rnd = random.Random(2)
    for _ in range(500):
        d = duration_pb2.Duration(seconds=rnd.randrange(-5, 10**6), nanos=rnd.randrange(0, 10**9))
        raw = d.SerializeToString()
        st = status_pb2.Status(code=8)
        st.details.add(type_url="type.googleapis.com/google.rpc.RetryInfo",
                       value=bytes([0x0A, len(raw)]) + raw)
        assert _retry_delay(st) == pytest.approx(max(d.seconds + d.nanos / 1e9, 0.0), abs=1e-9)



@pytest.mark.parametrize("kwargs, want", [
    ({}, {"grpc.http2.bdp_probe": 0, "grpc.http2.lookahead_bytes": 1 << 20}),
    ({"options": [("grpc.http2.lookahead_bytes", 256 << 10), ("grpc.primary_user_agent", "t")]},
     {"grpc.http2.bdp_probe": 0, "grpc.http2.lookahead_bytes": 256 << 10, "grpc.primary_user_agent": "t"}),
    ({"options": [("grpc.http2.bdp_probe", 1)]}, {"grpc.http2.bdp_probe": 1, "grpc.http2.lookahead_bytes": 1 << 20}),
    ({"flow_control": False}, {}),
])
def test_channel_flow_control_options(monkeypatch, kwargs, want):
    """Both clients' channels get FLOW_CONTROL_OPTIONS, overridden key by
    key by the caller's options, or none with flow_control=False."""
    seen = []

    def recording(make):
        def channel(target, options=()):
            seen.append(dict(options))
            return make(target, options=options)
        return channel
    monkeypatch.setattr(grpc, "insecure_channel", recording(grpc.insecure_channel))
    monkeypatch.setattr(aio, "insecure_channel", recording(aio.insecure_channel))
    bc.Client("127.0.0.1:1", **kwargs).close()

    async def make_async():
        await bc.AsyncClient("127.0.0.1:1", **kwargs).close()
    asyncio.run(make_async())
    assert seen == [want, want]


def test_flow_control_options_serve(fake):
    """A channel with FLOW_CONTROL_OPTIONS carries calls (grpcio takes them)."""
    f, addr = fake
    f.answers = [OK]
    with bc.Client(addr) as c:
        assert c.submit(bc.complete("m", "p")).text == "done"

    async def call():
        async with bc.AsyncClient(addr) as ac:
            return await ac.submit(bc.complete("m", "p"))
    assert asyncio.run(call()).text == "done"
