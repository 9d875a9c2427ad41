"""Builders of batcher.v1.Request messages, and of the tools, response
formats and tool-call turns of a chat."""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from google.protobuf import duration_pb2, struct_pb2

from ._gen.batcher.v1 import batcher_pb2 as pb

Message = Union[str, tuple[str, str], pb.ChatMessage]
ToolChoice = Union[str, pb.ToolChoice]

_TOOL_CHOICE_MODES = {
    "auto": pb.TOOL_CHOICE_MODE_AUTO,
    "none": pb.TOOL_CHOICE_MODE_NONE,
    "required": pb.TOOL_CHOICE_MODE_REQUIRED,
}


def chat(model: str, *messages: Message, tools: Sequence[pb.Tool] = (),
         tool_choice: Optional[ToolChoice] = None, parallel_tool_calls: Optional[bool] = None,
         response_format: Optional[pb.ResponseFormat] = None, **options) -> pb.Request:
    """A chat request. Each message is a user's text, a (role, content)
    pair, or a ChatMessage (an assistant turn with tool calls, a tool
    result): ``chat("sim-chat", ("system", "Be brief."), "Hello")``.

    ``tools`` are the functions the model may call (see ``tool``);
    ``tool_choice`` is "auto", "none", "required", or the name of the one
    function the model must call (a pb.ToolChoice says it explicitly, for a
    function named like a mode); ``response_format`` is ``json_object()`` or
    ``json_schema(...)``."""
    turns = []
    for m in messages:
        if isinstance(m, pb.ChatMessage):
            turns.append(m)
            continue
        role, content = ("user", m) if isinstance(m, str) else m
        turns.append(pb.ChatMessage(role=role, content=content))
    req = _request(model, options, chat=pb.ChatInput(messages=turns))
    req.tools.extend(tools)
    if tool_choice is not None:
        req.tool_choice.CopyFrom(_tool_choice(tool_choice))
    if parallel_tool_calls is not None:
        req.parallel_tool_calls = parallel_tool_calls
    if response_format is not None:
        req.response_format.CopyFrom(response_format)
    return req


def tool(name: str, description: str = "", parameters: Optional[Mapping[str, Any]] = None, *,
         strict: bool = False) -> pb.Tool:
    """A function the model may call. ``parameters`` is its arguments' JSON
    Schema as a dict (None: no arguments); with ``strict`` the arguments
    must follow it exactly."""
    t = pb.Tool(name=name, description=description, strict=strict)
    if parameters is not None:
        t.parameters.CopyFrom(_struct(parameters, f"tool {name!r} parameters"))
    return t


def json_object() -> pb.ResponseFormat:
    """Asks for an answer that is any JSON object."""
    return pb.ResponseFormat(type=pb.RESPONSE_FORMAT_TYPE_JSON_OBJECT)


def json_schema(name: str, schema: Mapping[str, Any], *, strict: bool = True,
                description: str = "") -> pb.ResponseFormat:
    """Asks for an answer that validates against ``schema`` (a dict), exactly
    when ``strict``."""
    return pb.ResponseFormat(type=pb.RESPONSE_FORMAT_TYPE_JSON_SCHEMA, name=name, description=description,
                             schema=_struct(schema, f"schema {name!r}"), strict=strict)


def assistant(completion: Union[pb.Completion, pb.OutputMessage]) -> pb.ChatMessage:
    """The assistant turn a completion answered with (its text and tool
    calls), to send back in the next request of the conversation."""
    m = completion.message if isinstance(completion, pb.Completion) else completion
    content = m.content
    if isinstance(completion, pb.Completion) and not completion.HasField("message"):
        content = completion.text  # a plain text answer has no message
    return pb.ChatMessage(role="assistant", content=content, tool_calls=m.tool_calls)


def tool_result(call: Union[str, pb.ToolCall], content: Any) -> pb.ChatMessage:
    """The tool turn answering ``call`` (a ToolCall or its id). ``content``
    is the result: text as it is, anything else as JSON."""
    call_id = call if isinstance(call, str) else call.id
    text = content if isinstance(content, str) else json.dumps(content)
    return pb.ChatMessage(role="tool", tool_call_id=call_id, content=text)


def tool_calls(completion: pb.Completion) -> Sequence[pb.ToolCall]:
    """The tool calls of a completion's answer (empty when it is text)."""
    return completion.message.tool_calls


def arguments(call: pb.ToolCall) -> Any:
    """A tool call's arguments, decoded from their JSON text; raises
    ValueError when the model wrote something that is not JSON."""
    return json.loads(call.arguments)


def _tool_choice(choice: ToolChoice) -> pb.ToolChoice:
    if isinstance(choice, pb.ToolChoice):
        return choice
    mode = _TOOL_CHOICE_MODES.get(choice)
    return pb.ToolChoice(mode=mode) if mode is not None else pb.ToolChoice(function=choice)


def _struct(value: Mapping[str, Any], what: str) -> struct_pb2.Struct:
    if not isinstance(value, Mapping):
        raise TypeError(f"{what}: must be a JSON object (a dict), got {type(value).__name__}")
    s = struct_pb2.Struct()
    s.update(value)
    return s


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


__all__: Iterable[str] = ("arguments", "assistant", "chat", "complete", "embed", "json_object", "json_schema",
                          "tool", "tool_calls", "tool_result")
