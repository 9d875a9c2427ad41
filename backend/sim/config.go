package sim

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// Defaults and limits of a Config.
const (
	// DefaultDimensions is an embedding's size when its model sets none.
	DefaultDimensions = 32
	// MaxDimensions bounds Dimensions.
	MaxDimensions = 4096
	// DefaultMaxTokens applies when neither the batch nor the request sets
	// max_tokens (only in Call; the core always resolves it).
	DefaultMaxTokens = 256
)

// Config describes a simulated provider. The zero Config is a valid,
// instant, unlimited provider that accepts native batches of any size.
type Config struct {
	// BaseLatency is every call's fixed latency. Must not be negative.
	BaseLatency time.Duration
	// PerToken is added for each generated token of the call's longest
	// output. Must not be negative.
	PerToken time.Duration
	// TimeToFirstToken is a streamed call's wait before its first delta
	// (Stream). 0: BaseLatency. Must not be negative.
	TimeToFirstToken time.Duration
	// TokensPerSecond is a streamed call's pace after its first delta, one
	// word (token) a delta. 0: one token per PerToken (instant when that is
	// 0 too). Must not be negative.
	TokensPerSecond float64

	// MaxConcurrency bounds the calls in flight; 0 means no bound. A call
	// beyond it fails at once with a 429 rate-limit error, as real providers
	// answer, rather than waiting.
	MaxConcurrency int
	// RPM and TPM are requests and tokens per minute; 0 turns a limit off.
	// Each is a token bucket refilling continuously at its rate. A call's
	// tokens are its prompt tokens plus max_tokens for each generating input.
	RPM int
	TPM int
	// RPMBurst is the request bucket's size. Default: one second's allowance
	// rounded up (providers enforce per-minute limits over shorter windows).
	RPMBurst int
	// TPMBurst is the token bucket's size. Default: TPM, one minute's
	// allowance. A call larger than the bucket fails with a 413
	// invalid-request error, since retrying cannot help it.
	TPMBurst int
	// HeaderLag makes the rate-limit details a call reports (remaining
	// counts and resets) as stale as a provider whose counters lag: they
	// describe the buckets HeaderLag ago, without the calls taken since.
	// 0: exact. Must not be negative.
	HeaderLag time.Duration

	// MaxBatchSize bounds a native batch's inputs; 0 means no bound. A larger
	// batch fails with a 400 invalid-request error.
	MaxBatchSize int
	// FanOut, when set, makes Dispatch send one concurrent call per input
	// instead of one native batch call. Each sub-call counts as a request.
	FanOut bool

	// FailureRate is the probability (0 to 1) that a call fails as a whole
	// with a transient 503 server error, after BaseLatency.
	FailureRate float64
	// PartialFailureRate is the probability (0 to 1) that one input of an
	// otherwise successful call fails with a 500 server error while its
	// batch-mates succeed.
	PartialFailureRate float64
	// Seed seeds the failure RNG.
	Seed int64

	// Dimensions is an embedding's size for models not in Models. Default
	// DefaultDimensions; 1 to MaxDimensions.
	Dimensions int
	// Models holds per-model settings. Models not listed take the defaults:
	// the provider serves every model name.
	Models map[string]Model
}

// Model holds one simulated model's settings.
type Model struct {
	// Dimensions is the model's embedding size. Default Config.Dimensions;
	// 1 to MaxDimensions.
	Dimensions int
}

// Validate reports every bad field of c, each error naming its field.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.BaseLatency < 0 {
		bad("base_latency", "must not be negative, got %v", c.BaseLatency)
	}
	if c.PerToken < 0 {
		bad("per_token", "must not be negative, got %v", c.PerToken)
	}
	if c.TimeToFirstToken < 0 {
		bad("time_to_first_token", "must not be negative, got %v", c.TimeToFirstToken)
	}
	if math.IsNaN(c.TokensPerSecond) || math.IsInf(c.TokensPerSecond, 0) || c.TokensPerSecond < 0 {
		bad("tokens_per_second", "must be a finite number, not negative, got %v", c.TokensPerSecond)
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"max_concurrency", c.MaxConcurrency}, {"rpm", c.RPM}, {"tpm", c.TPM},
		{"rpm_burst", c.RPMBurst}, {"tpm_burst", c.TPMBurst}, {"header_lag", int(c.HeaderLag)}, {"max_batch_size", c.MaxBatchSize},
	} {
		if f.v < 0 {
			bad(f.name, "must not be negative, got %d", f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"failure_rate", c.FailureRate}, {"partial_failure_rate", c.PartialFailureRate}} {
		if math.IsNaN(f.v) || f.v < 0 || f.v > 1 {
			bad(f.name, "must be 0 to 1, got %v", f.v)
		}
	}
	if c.Dimensions < 0 || c.Dimensions > MaxDimensions {
		bad("dimensions", "must be 1 to %d, got %d", MaxDimensions, c.Dimensions)
	}
	names := make([]string, 0, len(c.Models))
	for name := range c.Models {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "" {
			bad("models", "a model name must not be empty")
		}
		if d := c.Models[name].Dimensions; d < 0 || d > MaxDimensions {
			bad(fmt.Sprintf("models[%q].dimensions", name), "must be 1 to %d, got %d", MaxDimensions, d)
		}
	}
	return errors.Join(errs...)
}
