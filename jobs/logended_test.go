package jobs_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/batcherhq/batcher/jobs"
)

// endedHandler hands the "jobs: job ended" records to a channel.
type endedHandler struct{ ch chan slog.Record }

func (h endedHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h endedHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "jobs: job ended" {
		h.ch <- r.Clone()
	}
	return nil
}
func (h endedHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h endedHandler) WithGroup(string) slog.Handler      { return h }

// TestJobEndLogged: a job's end is logged with its state, counts and
// tokens, the figures summary.json holds, for an operator reading logs.
func TestJobEndLogged(t *testing.T) {
	h := endedHandler{ch: make(chan slog.Record, 4)}
	e := newEnv(t, func(c *jobs.Config) { c.Logger = slog.New(h) })
	j := e.create(t, jobs.Spec{Model: "chat", Name: "nightly"}, 3)
	last, _ := e.wait(t, j.ID)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var rec slog.Record
	select {
	case rec = <-h.ch:
	case <-ctx.Done():
		t.Fatal("no \"jobs: job ended\" record")
	}
	got := map[string]slog.Value{}
	rec.Attrs(func(a slog.Attr) bool { got[a.Key] = a.Value; return true })
	if got["job"].String() != j.ID || got["name"].String() != "nightly" || got["state"].String() != "completed" ||
		got["total"].Int64() != 3 || got["succeeded"].Int64() != 3 || got["failed"].Int64() != 0 ||
		got["tokens_in"].Int64() != last.TokensIn || got["tokens_out"].Int64() != last.TokensOut || last.TokensOut == 0 {
		t.Errorf("record %v, want job %s completed, 3 of 3 succeeded, tokens %d in %d out", got, j.ID, last.TokensIn, last.TokensOut)
	}
}
