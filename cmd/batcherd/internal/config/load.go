package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// MaxFileBytes bounds the config file.
const MaxFileBytes = 1 << 20

// EnvConfig names the config file when --config is not given.
const EnvConfig = "BATCHER_CONFIG"

// ErrVersion is Load's answer to --version: print the version and exit.
var ErrVersion = errors.New("version requested")

// A setting is a scalar that the environment and flags may set, besides the
// file.
type setting struct {
	path  string // the YAML path, used in errors
	flag  string
	env   string
	usage string
	set   func(c *Config, v string) error
}

var settings = []setting{
	{"listen", "listen", "BATCHER_LISTEN", "gRPC listen address, host:port (port 0 picks a free one)", func(c *Config, v string) error { c.Listen = v; return nil }},
	{"log.level", "log-level", "BATCHER_LOG_LEVEL", "log level: debug, info, warn or error", func(c *Config, v string) error { c.Log.Level = v; return nil }},
	{"log.format", "log-format", "BATCHER_LOG_FORMAT", "log format: json or text", func(c *Config, v string) error { c.Log.Format = v; return nil }},
	{"queue_capacity", "queue-capacity", "BATCHER_QUEUE_CAPACITY", "requests admitted and not yet done", intSetter(func(c *Config) *int { return &c.QueueCapacity })},
	{"queue_timeout", "queue-timeout", "BATCHER_QUEUE_TIMEOUT", "bound on every request's life", durSetter(func(c *Config) *Duration { return &c.QueueTimeout })},
	{"drain_timeout", "drain-timeout", "BATCHER_DRAIN_TIMEOUT", "bound on graceful shutdown", durSetter(func(c *Config) *Duration { return &c.DrainTimeout })},
	{"aging_step", "aging-step", "BATCHER_AGING_STEP", "time for waiting work to climb one priority", durSetter(func(c *Config) *Duration { return &c.AgingStep })},
	{"idle_lane_timeout", "idle-lane-timeout", "BATCHER_IDLE_LANE_TIMEOUT", "how long an empty lane lives", durSetter(func(c *Config) *Duration { return &c.IdleLaneTimeout })},
	{"max_lanes", "max-lanes", "BATCHER_MAX_LANES", "bound on live lanes (distinct route, target and parameters)", intSetter(func(c *Config) *int { return &c.MaxLanes })},
	{"stream_window", "stream-window", "BATCHER_STREAM_WINDOW", "requests one stream may have in flight", intSetter(func(c *Config) *int { return &c.StreamWindow })},
	{"summary_interval", "summary-interval", "BATCHER_SUMMARY_INTERVAL", "default interval between stream summaries", durSetter(func(c *Config) *Duration { return &c.SummaryInterval })},
}

func intSetter(field func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("want an integer, got %q", v)
		}
		*field(c) = n
		return nil
	}
}

func durSetter(field func(*Config) *Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("want a Go duration such as 250ms or 1m30s, got %q", v)
		}
		*field(c) = Duration(d)
		return nil
	}
}

// usageIntro opens -h's text, before the flags.
const usageIntro = `Usage: batcherd [flags]

batcherd is Batcher's daemon, a gRPC batching gateway in front of LLM and
model providers: it serves batcher.v1.BatcherService and JobService on
--listen, an OpenAI-compatible HTTP API on --http-listen, and /metrics, the
status page and pprof on --admin-listen. Without a config file it serves
three simulated models (sim-chat, sim-completion, sim-embed). It drains and
exits on SIGTERM or SIGINT, and reloads its files on SIGHUP.

Settings come from the YAML file (--config), then BATCHER_* variables, then
flags, each overriding the last. The backends and routes, the cache per
route and the security limits are set in the file only:
cmd/batcherd/batcherd.example.yaml documents every setting, and
docs/configuration.md explains them.

Examples:
  # The embedded simulated provider on 127.0.0.1:50051
  batcherd

  # A configuration file, with jobs stored under ./data
  batcherd --config batcherd.yaml --data-dir ./data

  # Tenants and TLS on every interface
  batcherd --listen 0.0.0.0:50051 --tenants tenants.yaml --tls-cert server.pem --tls-key server-key.pem

Flags:
`

// Load resolves the configuration from defaults, the YAML file named by
// --config or BATCHER_CONFIG, BATCHER_* variables read with lookupEnv, and
// the flags in args, each overriding the last, then validates it, checking
// too that each openai backend's api_key_env is set. With -h
// it writes the usage to usage and returns flag.ErrHelp; with --version it
// returns ErrVersion.
func Load(args []string, lookupEnv func(string) (string, bool), usage io.Writer) (*Config, error) {
	fs := flag.NewFlagSet("batcherd", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.Usage = func() {
		_, _ = io.WriteString(usage, usageIntro)
		fs.PrintDefaults()
	}
	var file string
	fileSet := false
	fs.Func("config", "YAML config file (env "+EnvConfig+")", func(v string) error { file, fileSet = v, true; return nil })
	versionAsked := false
	fs.BoolFunc("version", "print the version (module version and VCS revision) and exit", func(string) error { versionAsked = true; return nil })
	type flagValue struct {
		s *setting
		v string
	}
	var flagged []flagValue
	def := Default()
	for i := range settings {
		s := &settings[i]
		define := fs.Func
		if boolSettings[s.flag] {
			define = fs.BoolFunc // --insecure, without a value
		}
		define(s.flag, fmt.Sprintf("%s (env %s, default %s)", s.usage, s.env, defaultString(def, s.path)), func(v string) error {
			flagged = append(flagged, flagValue{s, v})
			return nil
		})
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if versionAsked {
		return nil, ErrVersion
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: batcherd takes only flags", fs.Arg(0))
	}

	if !fileSet {
		file, fileSet = lookupEnv(EnvConfig)
	}
	c := def
	if fileSet && file != "" {
		data, err := readFile(file)
		if err != nil {
			return nil, err
		}
		if c, err = decode(data); err != nil {
			return nil, fmt.Errorf("config file %s: %w", file, err)
		}
		c.File = file
	}
	var errs []error
	source := map[string]string{} // a setting's path → the variable or flag that set it last
	for i := range settings {
		s := &settings[i]
		if v, ok := lookupEnv(s.env); ok {
			source[s.path] = s.env
			if err := s.set(c, v); err != nil {
				errs = append(errs, fmt.Errorf("%s (%s): %w", s.path, s.env, err))
			}
		}
	}
	for _, f := range flagged {
		source[f.s.path] = "--" + f.s.flag
		if err := f.s.set(c, f.v); err != nil {
			errs = append(errs, fmt.Errorf("%s (--%s): %w", f.s.path, f.s.flag, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := errors.Join(c.Validate(), c.checkEnv(lookupEnv), c.checkHTTPEnv(lookupEnv)); err != nil {
		attribute(err, source)
		return nil, err
	}
	return c, nil
}

// attribute names, on each FieldError in err whose setting a variable or
// a flag gave, where the value came from: validation sees only the merged
// configuration, and "queue_capacity: must be at least 1" sends a reader
// to a file that may not say it.
func attribute(err error, source map[string]string) {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			attribute(e, source)
		}
		return
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		if src, ok := source[fe.Path]; ok {
			fe.Source = src
		}
	}
}

// defaultString is the default of the setting at path as --help shows it:
// its value in c (Default()), or "none" when that is empty.
func defaultString(c *Config, path string) string {
	if s := settingString(c, path); s != "" {
		return s
	}
	return "none"
}

// settingString is the value of the setting at path in c, as a flag would
// set it, or "" when it is empty.
func settingString(c *Config, path string) string {
	switch path {
	case "listen":
		return c.Listen
	case "log.level":
		return c.Log.Level
	case "log.format":
		return c.Log.Format
	case "queue_capacity":
		return strconv.Itoa(c.QueueCapacity)
	case "queue_timeout":
		return c.QueueTimeout.String()
	case "drain_timeout":
		return c.DrainTimeout.String()
	case "aging_step":
		return c.AgingStep.String()
	case "idle_lane_timeout":
		return c.IdleLaneTimeout.String()
	case "max_lanes":
		return strconv.Itoa(c.MaxLanes)
	case "stream_window":
		return strconv.Itoa(c.StreamWindow)
	case "summary_interval":
		return c.SummaryInterval.String()
	}
	if f := extraDefaults[path]; f != nil {
		return f(c)
	}
	if s := securityDefault(c, path); s != "" {
		return s
	}
	if s := jobsDefaultString(c, path); s != "" {
		return s
	}
	return telemetryDefaultString(c, path)
}

// extraDefaults shows the defaults of settings registered by other files
// (http.go), by YAML path.
var extraDefaults = map[string]func(*Config) string{}

func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	defer func() { _ = f.Close() }() // read only
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", name, err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("config file %s: larger than %d bytes", name, MaxFileBytes)
	}
	return data, nil
}

// Parse reads a YAML config over the defaults and validates it.
func Parse(data []byte) (*Config, error) {
	c, err := decode(data)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// decode reads a YAML config over the defaults. Unknown keys fail; errors
// name the path of the key at fault where it can be told.
func decode(data []byte) (*Config, error) {
	c := Default()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(c)
	if errors.Is(err, io.EOF) {
		return c, nil // an empty file: the defaults
	}
	if err != nil {
		return nil, describe(data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("the file holds more than one YAML document")
	}
	// yaml.v3 truncates a float into an integer field (max_concurrency:
	// 0.5 would read as 0, the default): refuse it instead.
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err == nil {
		if msgs := fractionalInts(&root, reflect.TypeFor[Config]()); len(msgs) > 0 {
			return nil, describe(data, &yaml.TypeError{Errors: msgs})
		}
	}
	return c, nil
}

// fractionalInts walks n as it decodes into a t and returns a "line N:"
// message for each number with a fraction that would land in an integer.
func fractionalInts(n *yaml.Node, t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[yaml.Unmarshaler]()) {
		return nil // decodes itself (Duration)
	}
	var out []string
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			out = append(out, fractionalInts(c, t)...)
		}
	case yaml.ScalarNode:
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			if f, err := strconv.ParseFloat(n.Value, 64); n.ShortTag() == "!!float" && (err != nil || f != math.Trunc(f)) {
				out = append(out, fmt.Sprintf("line %d: want a whole number, got %s", n.Line, n.Value))
			}
		}
	case yaml.SequenceNode:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for _, c := range n.Content {
				out = append(out, fractionalInts(c, t.Elem())...)
			}
		}
	case yaml.MappingNode:
		switch t.Kind() {
		case reflect.Map:
			for i := 1; i < len(n.Content); i += 2 {
				out = append(out, fractionalInts(n.Content[i], t.Elem())...)
			}
		case reflect.Struct:
			fields := yamlFields(t)
			for i := 0; i+1 < len(n.Content); i += 2 {
				if ft, ok := fields[n.Content[i].Value]; ok {
					out = append(out, fractionalInts(n.Content[i+1], ft)...)
				}
			}
		}
	}
	return out
}

// yamlFields maps a struct's YAML keys to their field types, inline
// structs' keys included.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case name == "-":
		case opts == "inline" || strings.Contains(opts, "inline"):
			for k, v := range yamlFields(f.Type) {
				out[k] = v
			}
		case name == "":
			out[strings.ToLower(f.Name)] = f.Type
		default:
			out[name] = f.Type
		}
	}
	return out
}

var lineRE = regexp.MustCompile(`^line (\d+): `)

// describe rewrites a decode error's "line N:" prefixes to name the path
// of the key on that line.
func describe(data []byte, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil {
		return err
	}
	paths := map[int]string{}
	indexPaths(&root, "", paths)
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = m
		sub := lineRE.FindStringSubmatch(m)
		if sub == nil {
			continue
		}
		line, _ := strconv.Atoi(sub[1])
		if p := paths[line]; p != "" {
			msgs[i] = fmt.Sprintf("%s (line %d): %s", p, line, m[len(sub[0]):])
		}
	}
	sort.Strings(msgs)
	return errors.New(strings.Join(msgs, "; "))
}

// indexPaths records, for each line, the path of the key or sequence item
// on it; for a line holding several (flow style), their common ancestor.
func indexPaths(n *yaml.Node, path string, paths map[int]string) {
	record := func(line int, p string) {
		if old, ok := paths[line]; ok {
			p = commonPath(old, p)
		}
		paths[line] = p
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			indexPaths(c, path, paths)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			record(k.Line, p)
			indexPaths(v, p, paths)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if c.Kind == yaml.ScalarNode {
				record(c.Line, p)
			}
			indexPaths(c, p, paths)
		}
	}
}

// commonPath returns the longest path that is an ancestor of (or equal to)
// both a and b, such as "routes[0]" for "routes[0].name" and
// "routes[0].operation".
func commonPath(a, b string) string {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	boundary := func(s string, i int) bool { return i == len(s) || s[i] == '.' || s[i] == '[' }
	for n > 0 && (!boundary(a, n) || !boundary(b, n)) {
		n--
	}
	return a[:n]
}
