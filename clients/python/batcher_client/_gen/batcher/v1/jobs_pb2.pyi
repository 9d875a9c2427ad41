from batcher_client._gen.batcher.v1 import batcher_pb2 as _batcher_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from batcher_client._gen.google.rpc import status_pb2 as _status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
ITEM_OUTCOME_CANCELLED: ItemOutcome
ITEM_OUTCOME_EXPIRED: ItemOutcome
ITEM_OUTCOME_FAILED: ItemOutcome
ITEM_OUTCOME_SUCCEEDED: ItemOutcome
ITEM_OUTCOME_UNSPECIFIED: ItemOutcome
JOB_STATE_CANCELLED: JobState
JOB_STATE_CANCELLING: JobState
JOB_STATE_COMPLETED: JobState
JOB_STATE_EXPIRED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_FINALIZING: JobState
JOB_STATE_QUEUED: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_VALIDATING: JobState

class CancelJobRequest(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class CancelJobResponse(_message.Message):
    __slots__ = ["job"]
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class CreateJobRequest(_message.Message):
    __slots__ = ["items", "spec"]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    items: JobItems
    spec: JobSpec
    def __init__(self, spec: _Optional[_Union[JobSpec, _Mapping]] = ..., items: _Optional[_Union[JobItems, _Mapping]] = ...) -> None: ...

class CreateJobResponse(_message.Message):
    __slots__ = ["accepted", "invalid", "job"]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    INVALID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    invalid: int
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., accepted: _Optional[int] = ..., invalid: _Optional[int] = ...) -> None: ...

class DeleteJobRequest(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class DeleteJobResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ["job"]
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class GroupProgress(_message.Message):
    __slots__ = ["counts", "group"]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    counts: JobCounts
    group: str
    def __init__(self, group: _Optional[str] = ..., counts: _Optional[_Union[JobCounts, _Mapping]] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ["created_at", "ended_at", "error", "id", "output_dir", "progress", "spec"]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_DIR_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    created_at: _timestamp_pb2.Timestamp
    ended_at: _timestamp_pb2.Timestamp
    error: _status_pb2.Status
    id: str
    output_dir: str
    progress: JobProgress
    spec: JobSpec
    def __init__(self, id: _Optional[str] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., progress: _Optional[_Union[JobProgress, _Mapping]] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ..., output_dir: _Optional[str] = ...) -> None: ...

class JobCounts(_message.Message):
    __slots__ = ["cancelled", "expired", "failed", "pending", "running", "succeeded", "total"]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    cancelled: int
    expired: int
    failed: int
    pending: int
    running: int
    succeeded: int
    total: int
    def __init__(self, total: _Optional[int] = ..., pending: _Optional[int] = ..., running: _Optional[int] = ..., succeeded: _Optional[int] = ..., failed: _Optional[int] = ..., cancelled: _Optional[int] = ..., expired: _Optional[int] = ...) -> None: ...

class JobItems(_message.Message):
    __slots__ = ["openai_lines", "requests"]
    OPENAI_LINES_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    openai_lines: _containers.RepeatedCompositeFieldContainer[OpenAIBatchLine]
    requests: _containers.RepeatedCompositeFieldContainer[_batcher_pb2.Request]
    def __init__(self, requests: _Optional[_Iterable[_Union[_batcher_pb2.Request, _Mapping]]] = ..., openai_lines: _Optional[_Iterable[_Union[OpenAIBatchLine, _Mapping]]] = ...) -> None: ...

class JobProgress(_message.Message):
    __slots__ = ["cost_usd", "counts", "elapsed", "eta", "groups", "items_per_hour", "saving_usd", "state", "success_rate", "time", "tokens_in", "tokens_out", "tokens_per_second", "upstream_batches", "upstream_eta", "upstream_items"]
    class UpstreamBatchesEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_FIELD_NUMBER: _ClassVar[int]
    ETA_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    ITEMS_PER_HOUR_FIELD_NUMBER: _ClassVar[int]
    SAVING_USD_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_RATE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    TOKENS_IN_FIELD_NUMBER: _ClassVar[int]
    TOKENS_OUT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_BATCHES_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_ETA_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_ITEMS_FIELD_NUMBER: _ClassVar[int]
    cost_usd: float
    counts: JobCounts
    elapsed: _duration_pb2.Duration
    eta: _duration_pb2.Duration
    groups: _containers.RepeatedCompositeFieldContainer[GroupProgress]
    items_per_hour: float
    saving_usd: float
    state: JobState
    success_rate: float
    time: _timestamp_pb2.Timestamp
    tokens_in: int
    tokens_out: int
    tokens_per_second: float
    upstream_batches: _containers.ScalarMap[str, int]
    upstream_eta: _duration_pb2.Duration
    upstream_items: int
    def __init__(self, state: _Optional[_Union[JobState, str]] = ..., counts: _Optional[_Union[JobCounts, _Mapping]] = ..., groups: _Optional[_Iterable[_Union[GroupProgress, _Mapping]]] = ..., success_rate: _Optional[float] = ..., tokens_in: _Optional[int] = ..., tokens_out: _Optional[int] = ..., tokens_per_second: _Optional[float] = ..., items_per_hour: _Optional[float] = ..., elapsed: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., eta: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., cost_usd: _Optional[float] = ..., saving_usd: _Optional[float] = ..., upstream_items: _Optional[int] = ..., upstream_batches: _Optional[_Mapping[str, int]] = ..., upstream_eta: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class JobResult(_message.Message):
    __slots__ = ["completion", "cost_usd", "cursor", "custom_id", "dispatch", "group", "item", "judge", "model", "outcome", "run"]
    COMPLETION_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_ID_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    JUDGE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    completion: _batcher_pb2.Completion
    cost_usd: float
    cursor: str
    custom_id: str
    dispatch: str
    group: str
    item: int
    judge: bool
    model: str
    outcome: ItemOutcome
    run: int
    def __init__(self, item: _Optional[int] = ..., custom_id: _Optional[str] = ..., group: _Optional[str] = ..., run: _Optional[int] = ..., judge: bool = ..., outcome: _Optional[_Union[ItemOutcome, str]] = ..., completion: _Optional[_Union[_batcher_pb2.Completion, _Mapping]] = ..., model: _Optional[str] = ..., cursor: _Optional[str] = ..., cost_usd: _Optional[float] = ..., dispatch: _Optional[str] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ["completion_window", "concurrent_requests", "dispatch", "fail_on_invalid", "judge", "max_retries", "metadata", "model", "name", "output_dir", "params", "priority", "requests_per_minute", "retry_delay", "run_groups", "tokens_per_minute"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    COMPLETION_WINDOW_FIELD_NUMBER: _ClassVar[int]
    CONCURRENT_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_FIELD_NUMBER: _ClassVar[int]
    FAIL_ON_INVALID_FIELD_NUMBER: _ClassVar[int]
    JUDGE_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_DIR_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_PER_MINUTE_FIELD_NUMBER: _ClassVar[int]
    RETRY_DELAY_FIELD_NUMBER: _ClassVar[int]
    RUN_GROUPS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_MINUTE_FIELD_NUMBER: _ClassVar[int]
    completion_window: _duration_pb2.Duration
    concurrent_requests: int
    dispatch: str
    fail_on_invalid: bool
    judge: Judge
    max_retries: int
    metadata: _containers.ScalarMap[str, str]
    model: str
    name: str
    output_dir: str
    params: _batcher_pb2.GenerationParams
    priority: _batcher_pb2.Priority
    requests_per_minute: int
    retry_delay: _duration_pb2.Duration
    run_groups: _containers.RepeatedCompositeFieldContainer[RunGroup]
    tokens_per_minute: int
    def __init__(self, name: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., model: _Optional[str] = ..., params: _Optional[_Union[_batcher_pb2.GenerationParams, _Mapping]] = ..., priority: _Optional[_Union[_batcher_pb2.Priority, str]] = ..., max_retries: _Optional[int] = ..., retry_delay: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., concurrent_requests: _Optional[int] = ..., completion_window: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., run_groups: _Optional[_Iterable[_Union[RunGroup, _Mapping]]] = ..., judge: _Optional[_Union[Judge, _Mapping]] = ..., fail_on_invalid: bool = ..., requests_per_minute: _Optional[int] = ..., tokens_per_minute: _Optional[int] = ..., output_dir: _Optional[str] = ..., dispatch: _Optional[str] = ...) -> None: ...

class Judge(_message.Message):
    __slots__ = ["model", "params", "prompt_template"]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    model: str
    params: _batcher_pb2.GenerationParams
    prompt_template: str
    def __init__(self, model: _Optional[str] = ..., prompt_template: _Optional[str] = ..., params: _Optional[_Union[_batcher_pb2.GenerationParams, _Mapping]] = ...) -> None: ...

class ListJobResultsRequest(_message.Message):
    __slots__ = ["cursor", "id", "outcome"]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    cursor: str
    id: str
    outcome: ItemOutcome
    def __init__(self, id: _Optional[str] = ..., outcome: _Optional[_Union[ItemOutcome, str]] = ..., cursor: _Optional[str] = ...) -> None: ...

class ListJobResultsResponse(_message.Message):
    __slots__ = ["result"]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: JobResult
    def __init__(self, result: _Optional[_Union[JobResult, _Mapping]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ["page_size", "page_token", "state"]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    state: JobState
    def __init__(self, state: _Optional[_Union[JobState, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ["jobs", "next_page_token"]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class OpenAIBatchLine(_message.Message):
    __slots__ = ["line"]
    LINE_FIELD_NUMBER: _ClassVar[int]
    line: bytes
    def __init__(self, line: _Optional[bytes] = ...) -> None: ...

class RunGroup(_message.Message):
    __slots__ = ["backoff_factor", "delay", "max_retries", "model", "name", "next_model", "retry_delay", "runs", "seeds", "temperature"]
    BACKOFF_FACTOR_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NEXT_MODEL_FIELD_NUMBER: _ClassVar[int]
    RETRY_DELAY_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    SEEDS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    backoff_factor: float
    delay: _duration_pb2.Duration
    max_retries: int
    model: str
    name: str
    next_model: str
    retry_delay: _duration_pb2.Duration
    runs: int
    seeds: _containers.RepeatedScalarFieldContainer[int]
    temperature: float
    def __init__(self, name: _Optional[str] = ..., model: _Optional[str] = ..., runs: _Optional[int] = ..., temperature: _Optional[float] = ..., seeds: _Optional[_Iterable[int]] = ..., next_model: _Optional[str] = ..., delay: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., max_retries: _Optional[int] = ..., retry_delay: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., backoff_factor: _Optional[float] = ...) -> None: ...

class WatchJobRequest(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class WatchJobResponse(_message.Message):
    __slots__ = ["progress"]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    progress: JobProgress
    def __init__(self, progress: _Optional[_Union[JobProgress, _Mapping]] = ...) -> None: ...

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ItemOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
