from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BackendStats(_message.Message):
    __slots__ = ["batch_api_batches", "batch_api_requests", "breaker", "calls", "concurrency_limit", "dedup_hits", "fallbacks", "in_flight", "max_concurrency", "name", "rate_limited", "requests", "retries", "rpm_limit", "rpm_max", "rpm_used", "streamed", "streaming", "tpm_limit", "tpm_max", "tpm_used"]
    BATCH_API_BATCHES_FIELD_NUMBER: _ClassVar[int]
    BATCH_API_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    BREAKER_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    DEDUP_HITS_FIELD_NUMBER: _ClassVar[int]
    FALLBACKS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMITED_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    RPM_LIMIT_FIELD_NUMBER: _ClassVar[int]
    RPM_MAX_FIELD_NUMBER: _ClassVar[int]
    RPM_USED_FIELD_NUMBER: _ClassVar[int]
    STREAMED_FIELD_NUMBER: _ClassVar[int]
    STREAMING_FIELD_NUMBER: _ClassVar[int]
    TPM_LIMIT_FIELD_NUMBER: _ClassVar[int]
    TPM_MAX_FIELD_NUMBER: _ClassVar[int]
    TPM_USED_FIELD_NUMBER: _ClassVar[int]
    batch_api_batches: int
    batch_api_requests: int
    breaker: str
    calls: int
    concurrency_limit: int
    dedup_hits: int
    fallbacks: int
    in_flight: int
    max_concurrency: int
    name: str
    rate_limited: int
    requests: int
    retries: int
    rpm_limit: float
    rpm_max: int
    rpm_used: float
    streamed: int
    streaming: int
    tpm_limit: float
    tpm_max: int
    tpm_used: float
    def __init__(self, name: _Optional[str] = ..., breaker: _Optional[str] = ..., in_flight: _Optional[int] = ..., concurrency_limit: _Optional[int] = ..., max_concurrency: _Optional[int] = ..., rpm_limit: _Optional[float] = ..., tpm_limit: _Optional[float] = ..., rpm_max: _Optional[int] = ..., tpm_max: _Optional[int] = ..., rpm_used: _Optional[float] = ..., tpm_used: _Optional[float] = ..., calls: _Optional[int] = ..., requests: _Optional[int] = ..., rate_limited: _Optional[int] = ..., retries: _Optional[int] = ..., fallbacks: _Optional[int] = ..., dedup_hits: _Optional[int] = ..., batch_api_batches: _Optional[int] = ..., batch_api_requests: _Optional[int] = ..., streaming: _Optional[int] = ..., streamed: _Optional[int] = ...) -> None: ...

class FleetBudget(_message.Message):
    __slots__ = ["backend", "leases", "open_until", "paused_until", "rate_factor", "rpm_left", "rpm_used", "tpm_left", "tpm_used"]
    class LeasesEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    OPEN_UNTIL_FIELD_NUMBER: _ClassVar[int]
    PAUSED_UNTIL_FIELD_NUMBER: _ClassVar[int]
    RATE_FACTOR_FIELD_NUMBER: _ClassVar[int]
    RPM_LEFT_FIELD_NUMBER: _ClassVar[int]
    RPM_USED_FIELD_NUMBER: _ClassVar[int]
    TPM_LEFT_FIELD_NUMBER: _ClassVar[int]
    TPM_USED_FIELD_NUMBER: _ClassVar[int]
    backend: str
    leases: _containers.ScalarMap[str, int]
    open_until: _timestamp_pb2.Timestamp
    paused_until: _timestamp_pb2.Timestamp
    rate_factor: float
    rpm_left: float
    rpm_used: float
    tpm_left: float
    tpm_used: float
    def __init__(self, backend: _Optional[str] = ..., rate_factor: _Optional[float] = ..., paused_until: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., open_until: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., rpm_left: _Optional[float] = ..., tpm_left: _Optional[float] = ..., rpm_used: _Optional[float] = ..., tpm_used: _Optional[float] = ..., leases: _Optional[_Mapping[str, int]] = ...) -> None: ...

class FleetReplica(_message.Message):
    __slots__ = ["id", "info", "self"]
    class InfoEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    SELF_FIELD_NUMBER: _ClassVar[int]
    id: str
    info: _containers.ScalarMap[str, str]
    self: bool
    def __init__(self, id: _Optional[str] = ..., self: bool = ..., info: _Optional[_Mapping[str, str]] = ...) -> None: ...

class FleetStats(_message.Message):
    __slots__ = ["budgets", "redis_reachable", "replicas", "self"]
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    REDIS_REACHABLE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    SELF_FIELD_NUMBER: _ClassVar[int]
    budgets: _containers.RepeatedCompositeFieldContainer[FleetBudget]
    redis_reachable: bool
    replicas: _containers.RepeatedCompositeFieldContainer[FleetReplica]
    self: str
    def __init__(self, self_: _Optional[str] = ..., redis_reachable: bool = ..., replicas: _Optional[_Iterable[_Union[FleetReplica, _Mapping]]] = ..., budgets: _Optional[_Iterable[_Union[FleetBudget, _Mapping]]] = ...) -> None: ...

class JobStats(_message.Message):
    __slots__ = ["cancelled", "cost_usd", "done", "eta", "expired", "failed", "id", "items_per_second", "name", "saving_usd", "state", "succeeded", "tokens", "tokens_per_second", "total"]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    ETA_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    ITEMS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SAVING_USD_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    cancelled: int
    cost_usd: float
    done: int
    eta: _duration_pb2.Duration
    expired: int
    failed: int
    id: str
    items_per_second: float
    name: str
    saving_usd: float
    state: str
    succeeded: int
    tokens: int
    tokens_per_second: float
    total: int
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., state: _Optional[str] = ..., total: _Optional[int] = ..., done: _Optional[int] = ..., failed: _Optional[int] = ..., tokens: _Optional[int] = ..., items_per_second: _Optional[float] = ..., tokens_per_second: _Optional[float] = ..., eta: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., succeeded: _Optional[int] = ..., cost_usd: _Optional[float] = ..., saving_usd: _Optional[float] = ..., cancelled: _Optional[int] = ..., expired: _Optional[int] = ...) -> None: ...

class LaneStats(_message.Message):
    __slots__ = ["backend", "in_flight", "name", "queued_deferrable", "queued_high", "queued_low", "queued_normal", "queued_urgent", "route"]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUED_DEFERRABLE_FIELD_NUMBER: _ClassVar[int]
    QUEUED_HIGH_FIELD_NUMBER: _ClassVar[int]
    QUEUED_LOW_FIELD_NUMBER: _ClassVar[int]
    QUEUED_NORMAL_FIELD_NUMBER: _ClassVar[int]
    QUEUED_URGENT_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    backend: str
    in_flight: int
    name: str
    queued_deferrable: int
    queued_high: int
    queued_low: int
    queued_normal: int
    queued_urgent: int
    route: str
    def __init__(self, name: _Optional[str] = ..., route: _Optional[str] = ..., backend: _Optional[str] = ..., queued_urgent: _Optional[int] = ..., queued_high: _Optional[int] = ..., queued_normal: _Optional[int] = ..., queued_low: _Optional[int] = ..., queued_deferrable: _Optional[int] = ..., in_flight: _Optional[int] = ...) -> None: ...

class RequestStats(_message.Message):
    __slots__ = ["admitted", "completed", "completed_per_second", "failed", "latency_p50", "latency_p95", "latency_p99", "rejected", "tokens_per_second"]
    ADMITTED_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P50_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P95_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P99_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    admitted: int
    completed: int
    completed_per_second: float
    failed: int
    latency_p50: _duration_pb2.Duration
    latency_p95: _duration_pb2.Duration
    latency_p99: _duration_pb2.Duration
    rejected: int
    tokens_per_second: float
    def __init__(self, admitted: _Optional[int] = ..., rejected: _Optional[int] = ..., completed: _Optional[int] = ..., failed: _Optional[int] = ..., completed_per_second: _Optional[float] = ..., tokens_per_second: _Optional[float] = ..., latency_p50: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., latency_p95: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., latency_p99: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class StatsSnapshot(_message.Message):
    __slots__ = ["backends", "fleet", "jobs", "lanes", "requests", "streams", "time"]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    FLEET_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    LANES_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    backends: _containers.RepeatedCompositeFieldContainer[BackendStats]
    fleet: FleetStats
    jobs: _containers.RepeatedCompositeFieldContainer[JobStats]
    lanes: _containers.RepeatedCompositeFieldContainer[LaneStats]
    requests: RequestStats
    streams: StreamStats
    time: _timestamp_pb2.Timestamp
    def __init__(self, time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., lanes: _Optional[_Iterable[_Union[LaneStats, _Mapping]]] = ..., backends: _Optional[_Iterable[_Union[BackendStats, _Mapping]]] = ..., streams: _Optional[_Union[StreamStats, _Mapping]] = ..., jobs: _Optional[_Iterable[_Union[JobStats, _Mapping]]] = ..., requests: _Optional[_Union[RequestStats, _Mapping]] = ..., fleet: _Optional[_Union[FleetStats, _Mapping]] = ...) -> None: ...

class StreamStats(_message.Message):
    __slots__ = ["buffered", "open"]
    BUFFERED_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    buffered: int
    open: int
    def __init__(self, open: _Optional[int] = ..., buffered: _Optional[int] = ...) -> None: ...

class WatchStatsRequest(_message.Message):
    __slots__ = ["interval"]
    INTERVAL_FIELD_NUMBER: _ClassVar[int]
    interval: _duration_pb2.Duration
    def __init__(self, interval: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class WatchStatsResponse(_message.Message):
    __slots__ = ["snapshot"]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: StatsSnapshot
    def __init__(self, snapshot: _Optional[_Union[StatsSnapshot, _Mapping]] = ...) -> None: ...
