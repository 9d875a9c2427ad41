from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from batcher_client._gen.google.rpc import status_pb2 as _status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

CACHE_MODE_BYPASS: CacheMode
CACHE_MODE_REFRESH: CacheMode
CACHE_MODE_UNSPECIFIED: CacheMode
CACHE_MODE_USE: CacheMode
DEDUP_OFF: Dedup
DEDUP_ON: Dedup
DEDUP_UNSPECIFIED: Dedup
DESCRIPTOR: _descriptor.FileDescriptor
FINISH_REASON_CONTENT_FILTER: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_TOOL_CALLS: FinishReason
FINISH_REASON_UNSPECIFIED: FinishReason
PRIORITY_DEFERRABLE: Priority
PRIORITY_HIGH: Priority
PRIORITY_LOW: Priority
PRIORITY_NORMAL: Priority
PRIORITY_UNSPECIFIED: Priority
PRIORITY_URGENT: Priority
RESPONSE_FORMAT_TYPE_JSON_OBJECT: ResponseFormatType
RESPONSE_FORMAT_TYPE_JSON_SCHEMA: ResponseFormatType
RESPONSE_FORMAT_TYPE_TEXT: ResponseFormatType
RESPONSE_FORMAT_TYPE_UNSPECIFIED: ResponseFormatType
TOOL_CHOICE_MODE_AUTO: ToolChoiceMode
TOOL_CHOICE_MODE_NONE: ToolChoiceMode
TOOL_CHOICE_MODE_REQUIRED: ToolChoiceMode
TOOL_CHOICE_MODE_UNSPECIFIED: ToolChoiceMode
VERBOSITY_ALL: Verbosity
VERBOSITY_COMPLETIONS: Verbosity
VERBOSITY_UNSPECIFIED: Verbosity

class Batched(_message.Message):
    __slots__ = ["batch_id", "batch_size"]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    batch_size: int
    def __init__(self, batch_id: _Optional[str] = ..., batch_size: _Optional[int] = ...) -> None: ...

class Cancel(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ChatInput(_message.Message):
    __slots__ = ["messages"]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ["content", "name", "parts", "role", "tool_call_id", "tool_calls"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    content: str
    name: str
    parts: _containers.RepeatedCompositeFieldContainer[ContentPart]
    role: str
    tool_call_id: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., parts: _Optional[_Iterable[_Union[ContentPart, _Mapping]]] = ..., name: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., tool_call_id: _Optional[str] = ...) -> None: ...

class Completion(_message.Message):
    __slots__ = ["attempts", "backend", "batch_id", "batch_size", "cached", "choices", "deduplicated", "embedding", "error", "finish_reason", "id", "message", "metadata", "partial", "text", "time_to_first_token", "timings", "usage"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    CHOICES_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TIME_TO_FIRST_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    attempts: int
    backend: str
    batch_id: str
    batch_size: int
    cached: bool
    choices: _containers.RepeatedCompositeFieldContainer[OutputMessage]
    deduplicated: bool
    embedding: Embedding
    error: _status_pb2.Status
    finish_reason: FinishReason
    id: str
    message: OutputMessage
    metadata: _containers.ScalarMap[str, str]
    partial: bool
    text: str
    time_to_first_token: _duration_pb2.Duration
    timings: Timings
    usage: Usage
    def __init__(self, id: _Optional[str] = ..., text: _Optional[str] = ..., embedding: _Optional[_Union[Embedding, _Mapping]] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., batch_id: _Optional[str] = ..., batch_size: _Optional[int] = ..., attempts: _Optional[int] = ..., timings: _Optional[_Union[Timings, _Mapping]] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ..., backend: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., deduplicated: bool = ..., partial: bool = ..., time_to_first_token: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., message: _Optional[_Union[OutputMessage, _Mapping]] = ..., choices: _Optional[_Iterable[_Union[OutputMessage, _Mapping]]] = ..., cached: bool = ...) -> None: ...

class CompletionInput(_message.Message):
    __slots__ = ["prompt"]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    prompt: str
    def __init__(self, prompt: _Optional[str] = ...) -> None: ...

class ContentPart(_message.Message):
    __slots__ = ["image", "text"]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    image: ImagePart
    text: str
    def __init__(self, text: _Optional[str] = ..., image: _Optional[_Union[ImagePart, _Mapping]] = ...) -> None: ...

class Delta(_message.Message):
    __slots__ = ["finish_reason", "id", "index", "refusal", "text", "tool_calls", "usage"]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    finish_reason: FinishReason
    id: str
    index: int
    refusal: str
    text: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCallDelta]
    usage: Usage
    def __init__(self, id: _Optional[str] = ..., index: _Optional[int] = ..., text: _Optional[str] = ..., refusal: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCallDelta, _Mapping]]] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ...) -> None: ...

class Dispatched(_message.Message):
    __slots__ = ["attempt", "backend", "batch_id"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    backend: str
    batch_id: str
    def __init__(self, batch_id: _Optional[str] = ..., attempt: _Optional[int] = ..., backend: _Optional[str] = ...) -> None: ...

class Embedding(_message.Message):
    __slots__ = ["values"]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class EmbeddingInput(_message.Message):
    __slots__ = ["text"]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ["batched", "dispatched", "id", "queued", "retrying", "time"]
    BATCHED_FIELD_NUMBER: _ClassVar[int]
    DISPATCHED_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    RETRYING_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    batched: Batched
    dispatched: Dispatched
    id: str
    queued: Queued
    retrying: Retrying
    time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., queued: _Optional[_Union[Queued, _Mapping]] = ..., batched: _Optional[_Union[Batched, _Mapping]] = ..., dispatched: _Optional[_Union[Dispatched, _Mapping]] = ..., retrying: _Optional[_Union[Retrying, _Mapping]] = ...) -> None: ...

class Flush(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GenerationParams(_message.Message):
    __slots__ = ["frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n", "presence_penalty", "reasoning_effort", "seed", "stop", "temperature", "top_logprobs", "top_p"]
    class LogitBiasEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    LOGIT_BIAS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    REASONING_EFFORT_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    frequency_penalty: float
    logit_bias: _containers.ScalarMap[str, float]
    logprobs: bool
    max_tokens: int
    n: int
    presence_penalty: float
    reasoning_effort: str
    seed: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    temperature: float
    top_logprobs: int
    top_p: float
    def __init__(self, max_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., stop: _Optional[_Iterable[str]] = ..., seed: _Optional[int] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., n: _Optional[int] = ..., logit_bias: _Optional[_Mapping[str, float]] = ..., logprobs: bool = ..., top_logprobs: _Optional[int] = ..., reasoning_effort: _Optional[str] = ...) -> None: ...

class ImagePart(_message.Message):
    __slots__ = ["detail", "url"]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    detail: str
    url: str
    def __init__(self, url: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class Logprobs(_message.Message):
    __slots__ = ["content", "refusal"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    content: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    refusal: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    def __init__(self, content: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ..., refusal: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ...) -> None: ...

class OutputMessage(_message.Message):
    __slots__ = ["content", "finish_reason", "logprobs", "refusal", "tool_calls"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    content: str
    finish_reason: FinishReason
    logprobs: Logprobs
    refusal: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    def __init__(self, content: _Optional[str] = ..., refusal: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., logprobs: _Optional[_Union[Logprobs, _Mapping]] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ...) -> None: ...

class Queued(_message.Message):
    __slots__ = ["lane"]
    LANE_FIELD_NUMBER: _ClassVar[int]
    lane: str
    def __init__(self, lane: _Optional[str] = ...) -> None: ...

class Rejection(_message.Message):
    __slots__ = ["error", "id"]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    error: _status_pb2.Status
    id: str
    def __init__(self, id: _Optional[str] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ...) -> None: ...

class Request(_message.Message):
    __slots__ = ["cache", "chat", "completion", "dedup", "embedding", "extra_body", "id", "metadata", "model", "parallel_tool_calls", "params", "priority", "response_format", "stream", "timeout", "tool_choice", "tools", "traceparent", "tracestate", "user"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CACHE_FIELD_NUMBER: _ClassVar[int]
    CHAT_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_FIELD_NUMBER: _ClassVar[int]
    DEDUP_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    EXTRA_BODY_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FORMAT_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TRACESTATE_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    cache: CacheMode
    chat: ChatInput
    completion: CompletionInput
    dedup: Dedup
    embedding: EmbeddingInput
    extra_body: _struct_pb2.Struct
    id: str
    metadata: _containers.ScalarMap[str, str]
    model: str
    parallel_tool_calls: bool
    params: GenerationParams
    priority: Priority
    response_format: ResponseFormat
    stream: bool
    timeout: _duration_pb2.Duration
    tool_choice: ToolChoice
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    traceparent: str
    tracestate: str
    user: str
    def __init__(self, id: _Optional[str] = ..., model: _Optional[str] = ..., priority: _Optional[_Union[Priority, str]] = ..., chat: _Optional[_Union[ChatInput, _Mapping]] = ..., completion: _Optional[_Union[CompletionInput, _Mapping]] = ..., embedding: _Optional[_Union[EmbeddingInput, _Mapping]] = ..., params: _Optional[_Union[GenerationParams, _Mapping]] = ..., timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., traceparent: _Optional[str] = ..., tracestate: _Optional[str] = ..., dedup: _Optional[_Union[Dedup, str]] = ..., stream: bool = ..., tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., tool_choice: _Optional[_Union[ToolChoice, _Mapping]] = ..., parallel_tool_calls: bool = ..., response_format: _Optional[_Union[ResponseFormat, _Mapping]] = ..., extra_body: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., user: _Optional[str] = ..., cache: _Optional[_Union[CacheMode, str]] = ...) -> None: ...

class ResponseFormat(_message.Message):
    __slots__ = ["description", "name", "schema", "strict", "type"]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    description: str
    name: str
    schema: _struct_pb2.Struct
    strict: bool
    type: ResponseFormatType
    def __init__(self, type: _Optional[_Union[ResponseFormatType, str]] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., strict: bool = ...) -> None: ...

class Retrying(_message.Message):
    __slots__ = ["attempt", "delay", "message", "reason"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    delay: _duration_pb2.Duration
    message: str
    reason: str
    def __init__(self, attempt: _Optional[int] = ..., delay: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class StreamOptions(_message.Message):
    __slots__ = ["summary_interval", "verbosity"]
    SUMMARY_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    VERBOSITY_FIELD_NUMBER: _ClassVar[int]
    summary_interval: _duration_pb2.Duration
    verbosity: Verbosity
    def __init__(self, verbosity: _Optional[_Union[Verbosity, str]] = ..., summary_interval: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class StreamSummary(_message.Message):
    __slots__ = ["completed", "failed", "final", "in_flight", "rejected", "submitted", "throughput", "time"]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    completed: int
    failed: int
    final: bool
    in_flight: int
    rejected: int
    submitted: int
    throughput: float
    time: _timestamp_pb2.Timestamp
    def __init__(self, time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., submitted: _Optional[int] = ..., in_flight: _Optional[int] = ..., completed: _Optional[int] = ..., failed: _Optional[int] = ..., rejected: _Optional[int] = ..., throughput: _Optional[float] = ..., final: bool = ...) -> None: ...

class SubmitRequest(_message.Message):
    __slots__ = ["request"]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    request: Request
    def __init__(self, request: _Optional[_Union[Request, _Mapping]] = ...) -> None: ...

class SubmitResponse(_message.Message):
    __slots__ = ["completion"]
    COMPLETION_FIELD_NUMBER: _ClassVar[int]
    completion: Completion
    def __init__(self, completion: _Optional[_Union[Completion, _Mapping]] = ...) -> None: ...

class SubmitStreamRequest(_message.Message):
    __slots__ = ["cancel", "flush", "options", "request"]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    FLUSH_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    cancel: Cancel
    flush: Flush
    options: StreamOptions
    request: Request
    def __init__(self, options: _Optional[_Union[StreamOptions, _Mapping]] = ..., request: _Optional[_Union[Request, _Mapping]] = ..., cancel: _Optional[_Union[Cancel, _Mapping]] = ..., flush: _Optional[_Union[Flush, _Mapping]] = ...) -> None: ...

class SubmitStreamResponse(_message.Message):
    __slots__ = ["completion", "delta", "event", "rejection", "summary"]
    COMPLETION_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    REJECTION_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    completion: Completion
    delta: Delta
    event: Event
    rejection: Rejection
    summary: StreamSummary
    def __init__(self, event: _Optional[_Union[Event, _Mapping]] = ..., completion: _Optional[_Union[Completion, _Mapping]] = ..., rejection: _Optional[_Union[Rejection, _Mapping]] = ..., summary: _Optional[_Union[StreamSummary, _Mapping]] = ..., delta: _Optional[_Union[Delta, _Mapping]] = ...) -> None: ...

class SubmitStreamedRequest(_message.Message):
    __slots__ = ["request"]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    request: Request
    def __init__(self, request: _Optional[_Union[Request, _Mapping]] = ...) -> None: ...

class SubmitStreamedResponse(_message.Message):
    __slots__ = ["completion", "delta"]
    COMPLETION_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    completion: Completion
    delta: Delta
    def __init__(self, delta: _Optional[_Union[Delta, _Mapping]] = ..., completion: _Optional[_Union[Completion, _Mapping]] = ...) -> None: ...

class Timings(_message.Message):
    __slots__ = ["batch_wait", "queued", "total", "upstream"]
    BATCH_WAIT_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_FIELD_NUMBER: _ClassVar[int]
    batch_wait: _duration_pb2.Duration
    queued: _duration_pb2.Duration
    total: _duration_pb2.Duration
    upstream: _duration_pb2.Duration
    def __init__(self, batch_wait: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., queued: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., upstream: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., total: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class TokenLogprob(_message.Message):
    __slots__ = ["bytes", "logprob", "token", "top_logprobs"]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    bytes: bytes
    logprob: float
    token: str
    top_logprobs: _containers.RepeatedCompositeFieldContainer[TopLogprob]
    def __init__(self, token: _Optional[str] = ..., logprob: _Optional[float] = ..., bytes: _Optional[bytes] = ..., top_logprobs: _Optional[_Iterable[_Union[TopLogprob, _Mapping]]] = ...) -> None: ...

class Tool(_message.Message):
    __slots__ = ["description", "name", "parameters", "strict"]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    description: str
    name: str
    parameters: _struct_pb2.Struct
    strict: bool
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., strict: bool = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ["arguments", "id", "name"]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    arguments: str
    id: str
    name: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class ToolCallDelta(_message.Message):
    __slots__ = ["arguments", "id", "index", "name"]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    arguments: str
    id: str
    index: int
    name: str
    def __init__(self, index: _Optional[int] = ..., id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class ToolChoice(_message.Message):
    __slots__ = ["function", "mode"]
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    function: str
    mode: ToolChoiceMode
    def __init__(self, mode: _Optional[_Union[ToolChoiceMode, str]] = ..., function: _Optional[str] = ...) -> None: ...

class TopLogprob(_message.Message):
    __slots__ = ["bytes", "logprob", "token"]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    bytes: bytes
    logprob: float
    token: str
    def __init__(self, token: _Optional[str] = ..., logprob: _Optional[float] = ..., bytes: _Optional[bytes] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ["completion_tokens", "prompt_tokens", "total_tokens"]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    completion_tokens: int
    prompt_tokens: int
    total_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., total_tokens: _Optional[int] = ...) -> None: ...

class Priority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Dedup(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ToolChoiceMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ResponseFormatType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Verbosity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class CacheMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
