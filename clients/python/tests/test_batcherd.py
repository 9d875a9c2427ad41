"""The client against a real batcherd on its embedded simulated provider."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

import batcher_client as bc
from batcher_client import pb


@pytest.fixture
def client(batcherd):
    with bc.Client(batcherd, timeout=30) as c:
        yield c


def test_submit_chat(client):
    comp = client.submit(bc.chat("sim-chat", ("system", "Be brief."), "Hello there", max_tokens=8))
    assert comp.text
    assert comp.usage.completion_tokens > 0
    assert not comp.HasField("error")


def test_submit_embedding(client):
    comp = client.submit(bc.embed("sim-embed", "some text", id="e1"))
    assert comp.id == "e1"
    assert len(comp.embedding.values) > 0


def test_submit_bad_input_names_the_field(client):
    with pytest.raises(bc.BatcherError) as info:
        client.submit(bc.chat("no-such-model", "hi"))
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "model" in info.value.message


def test_submit_deadline(client):
    with pytest.raises(bc.BatcherError) as info:
        # A deferrable request waits for company far longer than 50 ms.
        client.submit(bc.complete("sim-completion", "slow", priority=pb.PRIORITY_DEFERRABLE), timeout=0.05)
    assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


def test_async_submit(batcherd):
    async def main():
        async with bc.AsyncClient(batcherd, timeout=30) as c:
            return await asyncio.gather(*(c.submit(bc.complete("sim-completion", f"p{i}", max_tokens=4))
                                          for i in range(5)))

    comps = asyncio.run(main())
    assert len(comps) == 5
    assert all(c.text for c in comps)


def test_async_submit_error(batcherd):
    async def main():
        async with bc.AsyncClient(batcherd) as c:
            await c.submit(bc.complete("no-such-model", "p"))

    with pytest.raises(bc.BatcherError) as info:
        asyncio.run(main())
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_stream_every_request_answered_once(client):
    got = {}
    events = []
    summaries = []
    with client.stream(verbosity=pb.VERBOSITY_ALL) as s:
        ids = [s.send(bc.complete("sim-completion", f"prompt {i}", max_tokens=4)) for i in range(20)]
        ids.append(s.send(bc.embed("sim-embed", "text", id="emb")))
        s.close()
        for item in s:
            if isinstance(item, pb.Completion):
                assert item.id not in got, f"{item.id} answered twice"
                got[item.id] = item
            elif isinstance(item, pb.Event):
                events.append(item)
            elif isinstance(item, pb.StreamSummary):
                summaries.append(item)
    assert sorted(got) == sorted(ids)
    assert all(not c.HasField("error") for c in got.values())
    assert {e.WhichOneof("kind") for e in events} >= {"queued", "batched", "dispatched"}
    assert summaries and summaries[-1].final and summaries[-1].completed == len(ids)


def test_stream_cancel(client):
    with client.stream() as s:
        s.send(bc.complete("sim-completion", "wait", id="c", priority=pb.PRIORITY_DEFERRABLE))
        s.cancel("c")
        s.close()
        comps = [i for i in s if isinstance(i, pb.Completion)]
    assert [c.id for c in comps] == ["c"]
    assert comps[0].error.code == grpc.StatusCode.CANCELLED.value[0]


def test_stream_flush(client):
    # Alone, a deferrable request waits up to the route's max wait (5 s) for
    # company; a flush sends it at once.
    start = time.monotonic()
    with client.stream() as s:
        s.send(bc.complete("sim-completion", "now", id="f", priority=pb.PRIORITY_DEFERRABLE))
        s.flush()
        first = next(i for i in s if isinstance(i, pb.Completion))
    assert first.id == "f" and first.text
    assert time.monotonic() - start < 4


def test_stream_rejection(client):
    with client.stream() as s:
        s.send(bc.complete("no-such-model", "p", id="bad"))
        s.close()
        items = list(s)
    rejections = [i for i in items if isinstance(i, pb.Rejection)]
    assert [r.id for r in rejections] == ["bad"]
    assert rejections[0].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]


def test_stream_send_after_close(client):
    with client.stream() as s:
        s.close()
        with pytest.raises(RuntimeError):
            s.send(bc.complete("sim-completion", "late"))
        assert [i for i in s if isinstance(i, pb.Completion)] == []


def test_stream_abort(client):
    s = client.stream()
    s.send(bc.complete("sim-completion", "wait", priority=pb.PRIORITY_DEFERRABLE))
    s.abort()
    assert [i for i in s if isinstance(i, pb.Completion)] == []


def test_submit_streamed(client):
    s = client.submit_streamed(bc.chat("sim-chat", "stream to me", max_tokens=8))
    deltas = list(s)
    assert len(deltas) > 2
    assert "".join(d.text for d in deltas) == s.completion.text
    assert deltas[-1].finish_reason != bc.pb.FINISH_REASON_UNSPECIFIED
    assert s.completion.HasField("time_to_first_token")


def test_submit_streamed_refused(client):
    with pytest.raises(bc.BatcherError) as e:
        list(client.submit_streamed(bc.embed("sim-embed", "x")))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
