package server

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
)

// codeServer answers Submit with the code its request's id names.
type codeServer struct {
	batcherv1.UnimplementedBatcherServiceServer
}

func (codeServer) Submit(_ context.Context, in *batcherv1.SubmitRequest) (*batcherv1.SubmitResponse, error) {
	n, err := strconv.Atoi(in.GetRequest().GetId())
	if err != nil {
		return nil, err
	}
	c := codes.Code(n)
	if c == codes.OK {
		return &batcherv1.SubmitResponse{}, nil
	}
	return nil, status.Error(c, "as asked")
}

// recordHandler keeps the level and code of every record.
type recordHandler struct {
	mu   sync.Mutex
	recs map[string]slog.Level // grpc.code -> level
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordHandler) WithGroup(string) slog.Handler            { return h }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "grpc.code" {
			h.mu.Lock()
			h.recs[a.Value.String()] = r.Level
			h.mu.Unlock()
			return false
		}
		return true
	})
	return nil
}

// TestAccessLogLevels: a call is logged at the configured level, a
// server-side failure at least at warn, and one that blames the server's
// code at least at error.
func TestAccessLogLevels(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelError} {
		t.Run(level.String(), func(t *testing.T) {
			h := &recordHandler{recs: map[string]slog.Level{}}
			gs := grpc.NewServer(AccessLog(slog.New(h), level)...)
			batcherv1.RegisterBatcherServiceServer(gs, codeServer{})
			cc, stop := serveBuf(t, gs)
			defer stop()
			defer func() { _ = cc.Close() }()
			c := batcherv1.NewBatcherServiceClient(cc)
			want := map[codes.Code]slog.Level{
				codes.OK:                level,
				codes.InvalidArgument:   level,
				codes.Unavailable:       max(level, slog.LevelWarn),
				codes.ResourceExhausted: max(level, slog.LevelWarn),
				codes.Internal:          max(level, slog.LevelError),
				codes.Unimplemented:     max(level, slog.LevelError),
			}
			for code := range want {
				_, err := c.Submit(t.Context(), &batcherv1.SubmitRequest{Request: &batcherv1.Request{Id: strconv.Itoa(int(code))}})
				if got := status.Code(err); got != code {
					t.Fatalf("Submit asked for %v: %v", code, err)
				}
			}
			// The interceptor logs a call before its answer leaves.
			h.mu.Lock()
			defer h.mu.Unlock()
			for code, lv := range want {
				got, ok := h.recs[code.String()]
				if !ok {
					t.Errorf("no record for a call that ended %v", code)
					continue
				}
				if got != lv {
					t.Errorf("a call that ended %v logged at %v, want %v", code, got, lv)
				}
			}
		})
	}
}
