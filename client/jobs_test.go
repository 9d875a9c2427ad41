package client_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/batcherhq/batcher/backend/sim"
	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/client"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"github.com/batcherhq/batcher/jobs"
	"github.com/batcherhq/batcher/server"
)

// startJobs serves a JobService on the simulated backend with SQLite in a
// temporary directory, over an in-memory listener.
func startJobs(t *testing.T) *client.Jobs {
	t.Helper()
	p, err := sim.New(sim.Config{BaseLatency: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	core, err := batcher.New(
		batcher.WithBackend(batcher.BackendConfig{Name: "sim", Backend: p}),
		batcher.WithRoute(batcher.Route{Name: "sim-chat", Op: batcher.OpChat, Backend: "sim",
			Batch: batcher.BatchConfig{MinBatchSize: 1, Window: time.Millisecond, MaxWait: 5 * time.Millisecond}}))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	store, err := jobs.OpenSQLite(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := jobs.New(jobs.Config{Store: store, Core: core, DataDir: dir, Exclusive: true, ConcurrentRequests: 200})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	server.NewJobService(m, nil).Register(gs)
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Shutdown(ctx)
		_ = core.Shutdown(ctx)
		_ = store.Close()
	})
	return client.NewJobs(conn)
}

func TestJobsFromIterator(t *testing.T) {
	j := startJobs(t)
	ctx := t.Context()
	items := func(yield func(*batcherv1.Request, error) bool) {
		for i := range 1234 {
			if !yield(client.Chat("sim-chat", client.User(fmt.Sprintf("item %d", i)), client.WithID(fmt.Sprint("id-", i))), nil) {
				return
			}
		}
	}
	created, err := j.CreateJob(ctx, &batcherv1.JobSpec{Name: "iter"}, items)
	if err != nil {
		t.Fatal(err)
	}
	if created.GetAccepted() != 1234 {
		t.Fatalf("accepted %d", created.GetAccepted())
	}
	id := created.GetJob().GetId()
	calls := 0
	last, err := j.Watch(ctx, id, func(*batcherv1.JobProgress) error { calls++; return nil })
	if err != nil || calls == 0 || last.GetState() != batcherv1.JobState_JOB_STATE_COMPLETED || last.GetCounts().GetSucceeded() != 1234 {
		t.Fatalf("Watch: %v after %d calls, last %v", err, calls, last)
	}
	n := 0
	var cursor string
	for r, err := range j.Results(ctx, id) {
		if err != nil {
			t.Fatal(err)
		}
		if r.GetItem() != int64(n) || r.GetCustomId() != fmt.Sprint("id-", n) || !strings.HasPrefix(r.GetCompletion().GetText(), fmt.Sprintf("item %d", n)) {
			t.Fatalf("result %d: %v", n, r)
		}
		n++
		if n == 1000 {
			cursor = r.GetCursor()
		}
	}
	if n != 1234 {
		t.Fatalf("%d results", n)
	}
	rest := 0
	for _, err := range j.Results(ctx, id, client.After(cursor), client.Outcome(batcherv1.ItemOutcome_ITEM_OUTCOME_SUCCEEDED)) {
		if err != nil {
			t.Fatal(err)
		}
		rest++
	}
	if rest != 234 {
		t.Fatalf("%d results after the cursor, want 234", rest)
	}
	// Stopping early ends the stream.
	for _, err := range j.Results(ctx, id) {
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	listed := 0
	for job, err := range j.List(ctx, batcherv1.JobState_JOB_STATE_COMPLETED) {
		if err != nil || job.GetId() != id {
			t.Fatalf("List: %v %v", job, err)
		}
		listed++
	}
	if listed != 1 {
		t.Fatalf("listed %d", listed)
	}
	if err := j.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Get(ctx, id); status.Code(err) != codes.NotFound {
		t.Fatalf("Get after Delete: %v", err)
	}
}

func TestJobsFromJSONL(t *testing.T) {
	j := startJobs(t)
	ctx := t.Context()
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"model":"sim-chat","messages":[{"role":"user","content":"hi %d"}]}}`+"\r\n", i, i)
	}
	b.WriteString("\n{broken\n")
	created, err := j.CreateJobFromJSONL(ctx, &batcherv1.JobSpec{}, strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if created.GetAccepted() != 300 || created.GetInvalid() != 1 {
		t.Fatalf("created %v", created)
	}
	last, err := j.Watch(ctx, created.GetJob().GetId(), nil)
	if err != nil || last.GetCounts().GetFailed() != 1 || last.GetCounts().GetSucceeded() != 300 {
		t.Fatalf("Watch: %v %v", last, err)
	}
	for r, err := range j.Results(ctx, created.GetJob().GetId(), client.Outcome(batcherv1.ItemOutcome_ITEM_OUTCOME_FAILED)) {
		if err != nil || !strings.Contains(r.GetCompletion().GetError().GetMessage(), "line 301: malformed JSON") {
			t.Fatalf("failed result %v %v", r, err)
		}
	}
}

func TestJobsCreateErrors(t *testing.T) {
	j := startJobs(t)
	ctx := t.Context()
	if _, err := j.CreateJob(ctx, &batcherv1.JobSpec{}, func(func(*batcherv1.Request, error) bool) {}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty job: %v", err)
	}
	boom := fmt.Errorf("source failed")
	var failing iter.Seq2[*batcherv1.Request, error] = func(yield func(*batcherv1.Request, error) bool) {
		if yield(client.Chat("sim-chat", client.User("x")), nil) {
			yield(nil, boom)
		}
	}
	if _, err := j.CreateJob(ctx, &batcherv1.JobSpec{}, failing); !errors.Is(err, boom) {
		t.Fatalf("failing source: %v", err)
	}
	if _, err := j.CreateJobFromJSONL(ctx, &batcherv1.JobSpec{}, strings.NewReader(strings.Repeat("x", client.MaxJSONLLine+10))); err == nil {
		t.Fatal("an overlong line was accepted")
	}
}
