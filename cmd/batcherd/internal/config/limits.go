package config

import (
	"github.com/batcherhq/batcher/server"
)

// streamLimitOptions are the server's stream limits from the file; the
// server validates them.
func (c *Config) streamLimitOptions() []server.Option {
	return []server.Option{
		server.WithMaxStreams(c.MaxStreams),
		server.WithMaxPendingMessages(c.MaxPendingMessages),
	}
}
