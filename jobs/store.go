package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors of the store and the manager.
var (
	// ErrNotFound: no job has the id.
	ErrNotFound = errors.New("jobs: job not found")
	// ErrConflict: the job is not in a state the change allows.
	ErrConflict = errors.New("jobs: job state does not allow it")
	// ErrEnded: the job had already ended, so the cancel did not take
	// (CancelUnended).
	ErrEnded = errors.New("jobs: the job has already ended")
	// ErrTooManyItems: the job has more items than the limit.
	ErrTooManyItems = errors.New("jobs: too many items")
	// ErrEmpty: the job has no items.
	ErrEmpty = errors.New("jobs: the job has no items")
	// ErrInvalid: bad input (a spec field, or an item with fail_on_invalid).
	ErrInvalid = errors.New("jobs: invalid")
	// ErrClosed: the manager is shutting down.
	ErrClosed = errors.New("jobs: closed")
	// ErrQuota: the job's tenant is at its quota of jobs not ended, or the
	// job has more items than the tenant's quota allows. The error's text
	// names the quota.
	ErrQuota = errors.New("jobs: quota exceeded")
)

// ListQuery selects a page of jobs (Manager.List, Store.ListJobs).
type ListQuery struct {
	// State, when not StateUnspecified, lists the jobs in it alone.
	State State
	// Kind, when set, lists the jobs of that Spec.Kind alone; empty:
	// every kind.
	Kind string
	// After is the id of the last job of the page before (empty: from
	// the newest).
	After string
	// Limit bounds the page.
	Limit int
}

// QuotaRetryAfter is how long a door tells a tenant at its quota of jobs
// not ended to wait before trying again: a job takes a while to end, so
// retrying at once is pointless.
const QuotaRetryAfter = 30 * time.Second

// errPrefix starts this package's errors' text.
const errPrefix = "jobs: "

// Message is err as a door shows it to its caller: without the "jobs: "
// this package starts its errors with, which names the package rather than
// anything the caller did.
func Message(err error) string {
	return strings.TrimPrefix(err.Error(), errPrefix)
}

// Reason is err as a door shows it beside a status or code that already
// says its kind: for a *KindError, the reason alone ("spec.name: at most
// 256 bytes"), without "jobs: " and the kind's words; otherwise Message.
func Reason(err error) string {
	var ke *KindError
	if errors.As(err, &ke) {
		return ke.Reason
	}
	return Message(err)
}

// KindError is an error of one of this package's kinds (ErrInvalid,
// ErrTooManyItems) with its reason apart, for Reason. Its text is the
// kind's and the reason's ("jobs: invalid: spec.name: at most 256 bytes"),
// and errors.Is matches the kind and the cause.
type KindError struct {
	Kind   error  // ErrInvalid or ErrTooManyItems
	Reason string // what is wrong, naming the field or line at fault
	Err    error  // the cause, or nil
}

// kindErr returns a *KindError of kind whose reason is format's: a %w in
// format is wrapped, as fmt.Errorf wraps it.
func kindErr(kind error, format string, args ...any) error {
	r := fmt.Errorf(format, args...)
	return &KindError{Kind: kind, Reason: r.Error(), Err: errors.Unwrap(r)}
}

func (e *KindError) Error() string { return e.Kind.Error() + ": " + e.Reason }

func (e *KindError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// Store keeps jobs and their tasks. Every implementation passes the
// conformance suite in jobs/storetest. All methods are safe for concurrent
// use, also from several processes sharing one database where the
// implementation allows it (PostgreSQL).
//
// Counts per state, per group and tokens are kept on the job as tasks move,
// in the same transaction, so that reading progress never scans tasks.
type Store interface {
	// CreateJob inserts j in StateValidating with no tasks, owned by
	// j.Tenant. j.ID must be new. With maxActive > 0 it refuses, with an
	// error wrapping ErrQuota, a job whose tenant already has maxActive
	// jobs not ended; the count and the insert are one transaction, also
	// between processes sharing the store.
	CreateJob(ctx context.Context, j *Job, maxActive int) error
	// AddTasks inserts a chunk of j's tasks, counting them by state. Tasks
	// may arrive in several chunks, in Seq order.
	AddTasks(ctx context.Context, jobID string, tasks []Task) error
	// Transition moves a job from one of from to to, recording errMsg when
	// not empty and the start and end times. It returns ErrConflict when
	// the job is in no state of from.
	Transition(ctx context.Context, id string, from []State, to State, errMsg string) error
	// GetJob returns the job, or ErrNotFound.
	GetJob(ctx context.Context, id string) (*Job, error)
	// ListJobs returns up to q.Limit jobs of tenant (empty: of every
	// tenant) that match q, newest first, filtered and bounded in the
	// query itself: a tenant with a million jobs costs a page, not a
	// scan. A q.After that names no job of tenant matching q.Kind is an
	// error wrapping ErrInvalid.
	ListJobs(ctx context.Context, tenant string, q ListQuery) ([]*Job, error)
	// DeleteJob removes the job and its tasks.
	DeleteJob(ctx context.Context, id string) error

	// Claim leases up to n pending tasks of the job to owner until
	// now+lease, lowest Seq first, and returns them in Seq order. Tasks
	// another owner holds are skipped, not waited for.
	Claim(ctx context.Context, jobID, owner string, n int, lease time.Duration) ([]Task, error)
	// Complete records the ends of tasks owner holds, in one transaction,
	// numbering them in commit order (DoneSeq). An outcome for a task the
	// owner no longer holds (its lease ended and it went back) is dropped;
	// Complete returns how many it recorded. A judge task becomes pending
	// once the last run of its input ends.
	Complete(ctx context.Context, jobID, owner string, outs []Outcome) (int, error)
	// EndPending ends up to n pending or waiting tasks of the job in state
	// (ItemCancelled or ItemExpired) with result, as Complete would, and
	// returns how many it ended.
	EndPending(ctx context.Context, jobID string, state ItemState, result []byte, n int) (int, error)
	// Extend renews the leases owner holds until now+lease.
	Extend(ctx context.Context, owner string, lease time.Duration) error
	// Hold gives owner a lease on the job until now+lease without claiming
	// a task: the creator of a VALIDATING job holds it, so that other
	// processes can tell a job being created from one whose creator died.
	// Extend renews it; the job's end, Release or DeleteJob ends it.
	Hold(ctx context.Context, jobID, owner string, lease time.Duration) error
	// Abandoned returns up to n jobs still VALIDATING, created before
	// before, that no owner holds: their creator died or left.
	Abandoned(ctx context.Context, before time.Time, n int) ([]string, error)
	// Release puts back to pending the running tasks whose lease ended
	// before now, or, with owner set, every task owner holds. It returns
	// how many went back.
	Release(ctx context.Context, owner string, now time.Time) (int, error)

	// Results returns up to n ended tasks of the job with Seq above after,
	// in Seq order, only those in state when it is terminal.
	Results(ctx context.Context, jobID string, after int64, state ItemState, n int) ([]Task, error)
	// Done returns up to n ended tasks with DoneSeq above after, in DoneSeq
	// order: what the output files have not yet got.
	Done(ctx context.Context, jobID string, after int64, n int) ([]Task, error)
	// Tasks returns the job's tasks with Seq in [from, to), in Seq order:
	// the runs of one input, for its judge.
	Tasks(ctx context.Context, jobID string, from, to int64) ([]Task, error)

	Close() error
}

// EndedError is the ErrEnded of a cancel that found its job ended: the
// job and the state it ended in, which a door names in its answer (an end
// is final, so the state is the job's for good). errors.Is matches
// ErrEnded.
type EndedError struct {
	ID    string
	State State
}

func (e *EndedError) Error() string { return fmt.Sprintf("%v %s: %s", ErrEnded, e.State, e.ID) }

// Is reports whether target is ErrEnded.
func (e *EndedError) Is(target error) bool { return target == ErrEnded }
