// Package config resolves batcherd's configuration: defaults, then an
// optional YAML file, then BATCHER_* environment variables, then flags, each
// overriding the last. It is the one place where flags, environment and file
// meet; it hands the core and the server plain options.
//
// Guarantees:
//   - a typo in the file fails: unknown keys are errors, reported with their
//     line; so does a BATCHER_* variable within two edits of a known one
//     (Config.CheckEnviron, called by batcherd at start); other unknown
//     BATCHER_* variables are warnings;
//   - a bad value fails at start with a message naming its path, for example
//     "routes[1].batching.window: must be positive, got -1s", and every bad
//     field is reported at once; nothing is clamped silently;
//   - without a file, the service runs out of the box on the embedded
//     simulated provider: backend "sim" with routes "sim-chat",
//     "sim-completion" and "sim-embed";
//   - a backend of type openai (package backend/openai) is checked as
//     openai.New would check it, with errors naming YAML paths such as
//     "backends[1].openai.base_url: must be set"; Load also checks that its
//     api_key_env is set. The key itself never sits in the file. What only
//     Build can see (a TLS file it cannot read) fails Build with an error
//     naming the backend: "backends[1] (openai-main): ...".
//
// Build builds the backends; with WithTracerProvider every upstream call
// of an openai backend is a span whose parent is its batch's span. The
// caller closes the Built once the core has drained.
package config
