"""Builders of batcher.v1.Request messages."""

from __future__ import annotations

from typing import Iterable, Mapping, Optional, Sequence, Union

from google.protobuf import duration_pb2

from ._gen.batcher.v1 import batcher_pb2 as pb

Message = Union[str, tuple[str, str]]


def chat(model: str, *messages: Message, **options) -> pb.Request:
    """A chat request. Each message is a user's text, or a (role, content)
    pair: ``chat("sim-chat", ("system", "Be brief."), "Hello")``."""
    turns = []
    for m in messages:
        role, content = ("user", m) if isinstance(m, str) else m
        turns.append(pb.ChatMessage(role=role, content=content))
    return _request(model, options, chat=pb.ChatInput(messages=turns))


def complete(model: str, prompt: str, **options) -> pb.Request:
    """A text completion request."""
    return _request(model, options, completion=pb.CompletionInput(prompt=prompt))


def embed(model: str, text: str, **options) -> pb.Request:
    """An embedding request."""
    return _request(model, options, embedding=pb.EmbeddingInput(text=text))


def _request(model: str, options: dict, **input_) -> pb.Request:
    return _apply(pb.Request(model=model, **input_), **options)


def _apply(req: pb.Request, *, id: str = "", priority: int = pb.PRIORITY_UNSPECIFIED,
           max_tokens: Optional[int] = None, temperature: Optional[float] = None,
           top_p: Optional[float] = None, stop: Sequence[str] = (),
           seed: Optional[int] = None, request_timeout: Optional[float] = None,
           metadata: Optional[Mapping[str, str]] = None,
           dedup: int = pb.DEDUP_UNSPECIFIED) -> pb.Request:
    """Sets a Request's fields. ``request_timeout`` (seconds) is the
    request's own timeout, carried in the message; the RPC's deadline is the
    ``timeout`` of Client.submit."""
    req.id = id
    req.priority = priority
    req.dedup = dedup
    params = {k: v for k, v in (("max_tokens", max_tokens), ("temperature", temperature),
                                 ("top_p", top_p), ("seed", seed)) if v is not None}
    if stop:
        params["stop"] = list(stop)
    if params:
        req.params.CopyFrom(pb.GenerationParams(**params))
    if request_timeout is not None:
        req.timeout.CopyFrom(_duration(request_timeout))
    if metadata:
        req.metadata.update(metadata)
    return req


def _duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d


__all__: Iterable[str] = ("chat", "complete", "embed")
