package jobs_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/jobs"
)

// stamps is a backend that answers at once and records when each request
// reached it, and its id.
type stamps struct {
	mu  sync.Mutex
	at  []time.Time
	ids []string
}

func (s *stamps) Dispatch(_ context.Context, b *batcher.Batch, out []batcher.Response) error {
	now := time.Now()
	s.mu.Lock()
	for _, r := range b.Requests {
		s.at = append(s.at, now)
		s.ids = append(s.ids, r.ID)
	}
	s.mu.Unlock()
	for i, r := range b.Requests {
		n := r.Params.MaxTokens
		out[i] = batcher.Response{Text: "ok", Usage: batcher.Usage{PromptTokens: 1, CompletionTokens: max(n, 1)}}
	}
	return nil
}

func (s *stamps) times() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.at)
}

// timesBy returns when each request reached the backend, split by whether
// its task's seq (the id's tail) is even or odd.
func (s *stamps) timesBy(t *testing.T) (even, odd []time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, id := range s.ids {
		seq, err := strconv.Atoi(id[strings.LastIndexByte(id, '/')+1:])
		if err != nil {
			t.Fatalf("request id %q: %v", id, err)
		}
		if seq%2 == 0 {
			even = append(even, s.at[i])
		} else {
			odd = append(odd, s.at[i])
		}
	}
	return even, odd
}

// newStampsEnv is a manager over a core whose route "rec" goes to a
// stamps backend.
func newStampsEnv(t *testing.T) (*env, *stamps) {
	t.Helper()
	s := &stamps{}
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "rec", Backend: s, MaxConcurrency: 64}),
		batcher.WithRoute(batcher.Route{Name: "rec", Op: batcher.OpChat, Backend: "rec",
			Batch: batcher.BatchConfig{MaxBatchSize: 64, MinBatchSize: 1, Window: time.Millisecond, MaxWait: time.Millisecond}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	return envOn(t, core), s
}

// Seed 000's per-group delay: a group's runs start at least delay apart,
// while an undelayed group of the same job is not held back by it.
func TestGroupDelay(t *testing.T) {
	e, s := newStampsEnv(t)
	const delay = 40 * time.Millisecond
	j := e.create(t, jobs.Spec{Model: "rec", ConcurrentRequests: 50, Groups: []jobs.Group{
		{Name: "slow", Delay: delay},
		{Name: "fast"},
	}}, 8)
	p, _ := e.wait(t, j.ID)
	if p.Groups["slow"].Succeeded != 8 || p.Groups["fast"].Succeeded != 8 {
		t.Fatalf("groups %+v", p.Groups)
	}
	at := s.times()
	if span := at[len(at)-1].Sub(at[0]); span < 7*delay-5*time.Millisecond {
		t.Fatalf("16 runs started within %v; the slow group's 8 need at least 7 delays of %v", span, delay)
	}
	// The fast group's runs went out with the first slow run or soon after,
	// before the slow group's second: more than one run started within the
	// first delay. (Whether they share the first batch depends on the
	// machine's speed; this does not.)
	if n := countBefore(at, at[0].Add(delay)); n < 2 {
		t.Errorf("%d run(s) started within the first delay of %v: the fast group waited for the slow one", n, delay)
	}
}

// A delayed group's held runs do not keep the job from claiming an
// undelayed group's later runs. With a window of 8 tasks the first claim
// takes items 0-3 (tasks are claimed item by item, slow then fast: seq
// 2*item and 2*item+1) and the pacer holds slow runs 1-3; the fast runs
// of items 4 and 5 start long before the slow group's fourth, not with it.
//
// The delay is a second: between the first runs' answers and the claim
// of items 4 and 5 lie a commit and a claim in SQLite, and under load
// (the race detector, another package's tests beside this one) that took
// past three delays of 300 ms, so the fast runs went with the slow
// group's fourth and the test failed with nothing held back.
func TestDelayedGroupDoesNotHoldBackClaims(t *testing.T) {
	e, s := newStampsEnv(t)
	const delay = time.Second
	j := e.create(t, jobs.Spec{Model: "rec", ConcurrentRequests: 8, Groups: []jobs.Group{
		{Name: "slow", Delay: delay},
		{Name: "fast"},
	}}, 6)
	p, _ := e.wait(t, j.ID)
	if p.Groups["slow"].Succeeded != 6 || p.Groups["fast"].Succeeded != 6 {
		t.Fatalf("groups %+v", p.Groups)
	}
	slow, fast := s.timesBy(t)
	slices.SortFunc(slow, time.Time.Compare)
	if last := slices.MaxFunc(fast, time.Time.Compare); !last.Before(slow[3]) {
		t.Errorf("the fast group's last run started %v after the slow group's first, not before its fourth (%v)",
			last.Sub(slow[0]), slow[3].Sub(slow[0]))
	}
}

func countBefore(at []time.Time, t0 time.Time) int {
	n := 0
	for _, t := range at {
		if t.Before(t0) {
			n++
		}
	}
	return n
}

// Seed 003's per-job limits: requests per minute and tokens per minute
// hold a job below the backend's own limits.
func TestJobRateLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec jobs.Spec
		n    int
		min  time.Duration
	}{
		// 1200/min = 20/s, a burst of 20: 40 requests take a second.
		{"rpm", jobs.Spec{Model: "rec", RPM: 1200}, 40, 900 * time.Millisecond},
		// 120000/min = 2000/s, a burst of 2000; 20 requests of about 205
		// tokens (a short prompt and max_tokens 200) take a second.
		{"tpm", jobs.Spec{Model: "rec", TPM: 120_000, Params: batcher.Params{MaxTokens: 200}}, 20, 900 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, s := newStampsEnv(t)
			tc.spec.ConcurrentRequests = 100
			j := e.create(t, tc.spec, tc.n)
			p, _ := e.wait(t, j.ID)
			if p.Counts.Succeeded != int64(tc.n) {
				t.Fatalf("counts %+v", p.Counts)
			}
			at := s.times()
			if span := at[len(at)-1].Sub(at[0]); span < tc.min {
				t.Fatalf("%d requests started within %v, want at least %v", tc.n, span, tc.min)
			}
		})
	}
}

// Per-group retries and backoff factor override the job's.
func TestGroupRetries(t *testing.T) {
	e := newEnv(t, nil)
	e.gate.failing.Store(true)
	zero, two := 0, 2
	j := e.create(t, jobs.Spec{Model: "gatedchat", MaxRetries: &zero, Groups: []jobs.Group{
		{Name: "retries", MaxRetries: &two, RetryDelay: time.Millisecond, BackoffFactor: 1},
		{Name: "none"},
	}}, 5)
	p, _ := e.wait(t, j.ID)
	if p.Groups["retries"].Failed != 5 || p.Groups["none"].Failed != 5 {
		t.Fatalf("groups %+v", p.Groups)
	}
	// 5 items tried 3 times in the group with 2 retries, once in the other.
	if n := e.gate.items.Load(); n != 20 {
		t.Fatalf("the backend saw %d items, want 20", n)
	}
}

func TestSpecPacingValidation(t *testing.T) {
	e := newEnv(t, nil)
	neg := -1
	nan, hot := float32(math.NaN()), float32(2.5)
	for _, tc := range []struct {
		spec jobs.Spec
		want string
	}{
		{jobs.Spec{Model: "chat", RPM: -1}, "spec.requests_per_minute"},
		{jobs.Spec{Model: "chat", TPM: -1}, "spec.tokens_per_minute"},
		{jobs.Spec{Model: "chat", Groups: []jobs.Group{{Delay: -time.Second}}}, "spec.run_groups[0].delay"},
		{jobs.Spec{Model: "chat", Groups: []jobs.Group{{Delay: 2 * time.Hour}}}, "spec.run_groups[0].delay"},
		{jobs.Spec{Model: "chat", Groups: []jobs.Group{{MaxRetries: &neg}}}, "spec.run_groups[0].max_retries"},
		{jobs.Spec{Model: "chat", Groups: []jobs.Group{{RetryDelay: -1}}}, "spec.run_groups[0].retry_delay"},
		{jobs.Spec{Model: "chat", Groups: []jobs.Group{{BackoffFactor: 0.5}}}, "spec.run_groups[0].backoff_factor"},
		{jobs.Spec{Model: "chat", Groups: []jobs.Group{{BackoffFactor: 11}}}, "spec.run_groups[0].backoff_factor"},
		{jobs.Spec{Model: "chat", Groups: []jobs.Group{{BackoffFactor: math.NaN()}}}, "spec.run_groups[0].backoff_factor"},
		{jobs.Spec{Model: "chat", Groups: []jobs.Group{{Temperature: &hot}}}, "spec.run_groups[0].temperature: 0 to 2, got 2.5"},
		// NaN once passed the range check and failed the spec's JSON
		// encoding: INTERNAL instead of INVALID_ARGUMENT.
		{jobs.Spec{Model: "chat", Groups: []jobs.Group{{Temperature: &nan}}}, "spec.run_groups[0].temperature: 0 to 2, got NaN"},
	} {
		_, err := e.m.Begin(t.Context(), tc.spec)
		if !errors.Is(err, jobs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want ErrInvalid naming %s", tc.spec, err, tc.want)
		}
	}
}
