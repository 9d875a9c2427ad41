package server

import (
	"context"
	"log/slog"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// AccessLog returns the options of an access log: go-grpc-middleware's
// logging interceptors, which write one record to log when each call
// finishes ("finished call", with the method, code, duration and peer),
// at level, and at least at warn for a server-side failure (at error for
// Unknown, Unimplemented, Internal and DataLoss).
//
// It costs every call, whether or not log's handler keeps the record: the
// interceptor gathers the call's fields before it logs. BENCHMARKS.md
// measures it.
func AccessLog(log *slog.Logger, level slog.Level) []grpc.ServerOption {
	logger := logging.LoggerFunc(func(ctx context.Context, l logging.Level, msg string, fields ...any) {
		log.Log(ctx, slog.Level(l), msg, fields...)
	})
	opts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(func(c codes.Code) logging.Level {
			switch c {
			case codes.Unknown, codes.Unimplemented, codes.Internal, codes.DataLoss:
				return logging.Level(max(level, slog.LevelError))
			case codes.DeadlineExceeded, codes.ResourceExhausted, codes.Unavailable:
				return logging.Level(max(level, slog.LevelWarn))
			}
			return logging.Level(level)
		}),
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(logging.UnaryServerInterceptor(logger, opts...)),
		grpc.ChainStreamInterceptor(logging.StreamServerInterceptor(logger, opts...)),
	}
}
