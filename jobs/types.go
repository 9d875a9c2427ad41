package jobs

import (
	"strconv"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// State is where a job is in its life.
type State uint8

// The job states, numbered as the proto's JobState.
const (
	StateUnspecified State = iota
	StateValidating
	StateQueued
	StateRunning
	StateFinalizing
	StateCompleted
	StateFailed
	StateCancelling
	StateCancelled
	StateExpired
)

var stateNames = [...]string{"unspecified", "validating", "queued", "running", "finalizing",
	"completed", "failed", "cancelling", "cancelled", "expired"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// States returns every state a job can be in, in order (not
// StateUnspecified): what job counts are labelled by.
func States() []State {
	out := make([]State, 0, len(stateNames)-1)
	for s := StateValidating; int(s) < len(stateNames); s++ {
		out = append(out, s)
	}
	return out
}

// Terminal reports whether s is an end state.
func (s State) Terminal() bool {
	return s == StateCompleted || s == StateFailed || s == StateCancelled || s == StateExpired
}

// ItemState is where one task (one run of one input, or its judge) is.
type ItemState uint8

// The task states. Succeeded and later are terminal. Waiting is a judge task
// whose runs have not all ended; it counts as pending.
const (
	ItemPending ItemState = iota
	ItemRunning
	ItemSucceeded
	ItemFailed
	ItemCancelled
	ItemExpired
	ItemWaiting
)

var itemStateNames = [...]string{"pending", "running", "succeeded", "failed", "cancelled", "expired", "waiting"}

func (s ItemState) String() string {
	if int(s) < len(itemStateNames) {
		return itemStateNames[s]
	}
	return "item_state(" + strconv.Itoa(int(s)) + ")"
}

// Terminal reports whether s is an end state.
func (s ItemState) Terminal() bool { return s >= ItemSucceeded && s <= ItemExpired }

// Spec configures a job.
type Spec struct {
	Name string `json:"name,omitempty"`
	// Metadata is the caller's, held to CheckMetadata; once the job is
	// created it holds Tags too.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Tags are the keys a door of Batcher's own marks its jobs with, each
	// beginning with ReservedMetadataPrefix (the Batch API's endpoint and
	// input file). Begin checks Metadata without them, then adds them to
	// it: they are stored, listed and returned with the caller's keys.
	Tags map[string]string `json:"-"`
	// Kind is set by a door of Batcher's own beside Tags: which door made
	// the job, so that the door can list its jobs alone (ListQuery.Kind)
	// without reading the others. KindOpenAIBatch or empty (every other
	// way in); Begin refuses any other value. The store keeps it in a
	// column of its own, not in the spec.
	Kind string `json:"-"`
	// Model is the default route for items that name none.
	Model string `json:"model,omitempty"`
	// Params are the default generation parameters for items that set none.
	Params batcher.Params `json:"params"`
	// Priority is PriorityLow or PriorityDeferrable (the default).
	Priority batcher.Priority `json:"priority"`
	// MaxRetries, when set, overrides the backend's retry count (0: no
	// retry); unset, the item keeps the backend's, also when RetryDelay is
	// set.
	MaxRetries *int `json:"max_retries,omitempty"`
	// RetryDelay, when positive, overrides the backend's first backoff
	// (alone: with the backend's retry count).
	RetryDelay time.Duration `json:"retry_delay,omitempty"`
	// ConcurrentRequests bounds the job's tasks in flight; 0: the
	// manager's default.
	ConcurrentRequests int `json:"concurrent_requests,omitempty"`
	// CompletionWindow, when positive, ends the tasks not done that long
	// after the job's creation as expired.
	CompletionWindow time.Duration `json:"completion_window,omitempty"`
	Groups           []Group       `json:"groups,omitempty"`
	Judge            *Judge        `json:"judge,omitempty"`
	FailOnInvalid    bool          `json:"fail_on_invalid,omitempty"`
	// RPM, when positive, bounds the job's request starts per minute, on
	// top of the backends' limits.
	RPM int `json:"requests_per_minute,omitempty"`
	// TPM, when positive, bounds the job's tokens per minute: a request's
	// estimate (batcher.Request.EstimatedTokens) when it starts, and what
	// its usage passed that estimate by when it ends.
	TPM int64 `json:"tokens_per_minute,omitempty"`
	// OutputDir, when set, is where the job's files go: a relative
	// directory under the manager's OutputRoot.
	OutputDir string `json:"output_dir,omitempty"`
	// Dispatch is DispatchOnline (empty: the same), DispatchBatchAPI or
	// DispatchAuto: whether the tasks go through the route's provider
	// batch API (Config.BatchRoutes) at its batch price.
	Dispatch string `json:"dispatch,omitempty"`
}

// KindOpenAIBatch is the Kind of a job made by the OpenAI Batch API
// (POST /v1/batches), which lists only its own.
const KindOpenAIBatch = "openai_batch"

// Group is a run group: every input runs Runs times on Model at
// Temperature.
type Group struct {
	Name        string   `json:"name"`
	Model       string   `json:"model,omitempty"`
	Runs        int      `json:"runs"`
	Temperature *float32 `json:"temperature,omitempty"`
	Seeds       []int64  `json:"seeds,omitempty"`
	// NextModel, when set, serves an input whose retries on Model are used
	// up, or that Model cannot serve at all (its breaker open).
	NextModel string `json:"next_model,omitempty"`
	// Delay, when positive, is the least time between the starts of two of
	// the group's runs.
	Delay time.Duration `json:"delay,omitempty"`
	// MaxRetries and RetryDelay, when set, override the job's for the
	// group's runs; BackoffFactor, when at least 1, the backend's factor.
	MaxRetries    *int          `json:"max_retries,omitempty"`
	RetryDelay    time.Duration `json:"retry_delay,omitempty"`
	BackoffFactor float64       `json:"backoff_factor,omitempty"`
}

// Judge is the judge stage: once every run of an input ended, Model gets
// PromptTemplate executed over the runs' outputs.
type Judge struct {
	Model          string         `json:"model"`
	PromptTemplate string         `json:"prompt_template"`
	Params         batcher.Params `json:"params"`
}

// Counts counts tasks by state. Pending includes judge tasks still waiting
// for their runs.
type Counts struct {
	Total     int64 `json:"total"`
	Pending   int64 `json:"pending"`
	Running   int64 `json:"running"`
	Succeeded int64 `json:"succeeded"`
	Failed    int64 `json:"failed"`
	Cancelled int64 `json:"cancelled"`
	Expired   int64 `json:"expired"`
}

// Ended returns the tasks that reached a terminal state.
func (c Counts) Ended() int64 { return c.Succeeded + c.Failed + c.Cancelled + c.Expired }

// add moves n tasks into state s (n may be negative).
func (c *Counts) add(s ItemState, n int64) {
	switch s {
	case ItemPending, ItemWaiting:
		c.Pending += n
	case ItemRunning:
		c.Running += n
	case ItemSucceeded:
		c.Succeeded += n
	case ItemFailed:
		c.Failed += n
	case ItemCancelled:
		c.Cancelled += n
	case ItemExpired:
		c.Expired += n
	}
}

// GroupJudge and GroupNone are the group indexes of judge tasks and of the
// tasks of a job without run groups.
const (
	GroupNone  = -1
	GroupJudge = -2
)

// Job is a job as stored.
type Job struct {
	ID string
	// Tenant owns the job: only calls made as that tenant see it. Empty:
	// no tenant (batcherd without a tenants file), seen by unscoped calls
	// only.
	Tenant    string
	Spec      Spec
	State     State
	Counts    Counts
	Groups    map[int]Counts // by group index, GroupJudge included
	TokensIn  int64
	TokensOut int64
	// Cost is what its tasks cost at their routes' price tables, in USD;
	// OnlineCost what the same tokens cost online: the saving is the
	// difference.
	Cost       float64
	OnlineCost float64
	CreatedAt  time.Time
	StartedAt  time.Time // zero until it first ran
	EndedAt    time.Time // zero until terminal
	// CancellingAt and FinalizingAt are when the job entered CANCELLING
	// and FINALIZING; zero if it did not.
	CancellingAt time.Time
	FinalizingAt time.Time
	// Error says why the job FAILED.
	Error string
	// Invalid counts the inputs that became error lines at creation.
	Invalid int64
}

// Saving returns what the job saved, in USD, against online dispatch of
// the same tokens.
func (j *Job) Saving() float64 { return max(j.OnlineCost-j.Cost, 0) }

// Deadline returns when the job's completion window ends; zero: never.
func (j *Job) Deadline() time.Time {
	if j.Spec.CompletionWindow <= 0 {
		return time.Time{}
	}
	return j.CreatedAt.Add(j.Spec.CompletionWindow)
}

// GroupName returns the name of group index g.
func (j *Job) GroupName(g int) string {
	switch {
	case g == GroupJudge:
		return "judge"
	case g >= 0 && g < len(j.Spec.Groups):
		return j.Spec.Groups[g].Name
	}
	return ""
}

// Task is one unit of work: one run of one input, or an input's judge.
type Task struct {
	Seq      int64 // order in the job, from 0: inputs in order, then groups, runs, judge
	Item     int64 // the input's index, from 0
	Group    int   // group index, GroupNone or GroupJudge
	Run      int
	CustomID string
	// Line is the input's line number (from 1) in the caller's stream.
	Line  int64
	State ItemState
	// Request is the encoded ItemRequest; empty for a judge task.
	Request []byte
	// Set once terminal:
	Model     string
	Result    []byte // the encoded Outcome record
	TokensIn  int64
	TokensOut int64
	DoneSeq   int64 // commit order in the job, from 1
	Attempts  int   // claims so far
}

// Outcome is a claimed task's end, as Complete records it.
type Outcome struct {
	Seq       int64
	Group     int
	State     ItemState // terminal
	Model     string
	Result    []byte
	TokensIn  int64
	TokensOut int64
	// Cost and OnlineCost are the task's cost in USD through its dispatch
	// mode and online (Manager.price); Dispatch is the mode, "" when its
	// route has no price table.
	Cost       float64
	OnlineCost float64
	Dispatch   string
	// JudgeSeq is the Seq of the input's judge task, or -1 when the job has
	// no judge; the input's runs are the tasks from RunsFrom up to it.
	JudgeSeq int64
	RunsFrom int64
	// Item, Run and CustomID describe the task for its output line; the
	// store does not read them.
	Item     int64
	Run      int
	CustomID string
	// DoneSeq is set by Complete: the task's done number, or 0 when the
	// outcome was dropped.
	DoneSeq int64
}
