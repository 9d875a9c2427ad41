// Package config resolves batcherd's configuration: defaults, then an
// optional YAML file, then BATCHER_* environment variables, then flags, each
// overriding the last. It is the one place where flags, environment and file
// meet; it hands the core and the server plain options.
//
// Guarantees:
//   - a typo in the file fails: unknown keys are errors, reported with their
//     line;
//   - a bad value fails at start with a message naming its path, for example
//     "routes[1].batching.window: must be positive, got -1s", and every bad
//     field is reported at once; nothing is clamped silently;
//   - without a file, the service runs out of the box on the embedded
//     simulated provider: backend "sim" with routes "sim-chat",
//     "sim-completion" and "sim-embed".
package config
