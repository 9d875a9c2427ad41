package openaiapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/batcherhq/batcher/batcher"
)

// Handler serves the OpenAI-compatible API in front of a batcher.Batcher.
// It translates HTTP calls into core requests and the core's results and
// errors back into OpenAI's shapes; it holds no batching logic. It is safe
// for concurrent use.
type Handler struct {
	core    *batcher.Batcher
	cfg     *config
	tokens  [][sha256.Size]byte // the tokens' hashes, compared in constant time
	served  http.Handler        // the routes, wrapped by tracing and metrics when on
	created int64               // reported as every model's creation time

	idPrefix string
	idSeq    atomic.Uint64
}

// New returns a Handler in front of core. A bad option fails with an error
// naming it.
func New(core *batcher.Batcher, opts ...Option) (*Handler, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	var prefix [6]byte
	_, _ = rand.Read(prefix[:]) // never fails (crypto/rand)
	h := &Handler{
		core:     core,
		cfg:      cfg,
		created:  time.Now().Unix(),
		idPrefix: hex.EncodeToString(prefix[:]),
	}
	for _, t := range cfg.tokens {
		h.tokens = append(h.tokens, sha256.Sum256([]byte(t)))
	}
	h.served = http.HandlerFunc(h.serve)
	if cfg.tracerProvider != nil || cfg.meterProvider != nil {
		h.served = instrument(h.served, cfg)
	}
	return h, nil
}

// instrument wraps next in otelhttp: a server span per call with a tracer
// provider, the http.server.* metrics with a meter provider. Whichever is
// not set is a no-op, not the global one, and without a tracer provider
// no traceparent is read. The metrics carry the endpoint's template as
// http.route, and the listen address set by WithServerAddress as
// server.address and server.port (none: an empty server.address and no
// port): otelhttp would otherwise take both from the Host header, which
// the caller chooses, so that any caller could add series without bound.
func instrument(next http.Handler, cfg *config) http.Handler {
	tp, mp, prop := cfg.tracerProvider, cfg.meterProvider, cfg.propagator
	if tp == nil {
		tp, prop = tracenoop.NewTracerProvider(), propagation.NewCompositeTextMapPropagator()
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	labeled := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if l, ok := otelhttp.LabelerFromContext(r.Context()); ok {
			l.Add(attribute.String("http.route", pathTemplate(r.URL.Path)))
		}
		next.ServeHTTP(w, r)
	})
	return otelhttp.NewHandler(labeled, "openai", // the operation, unused: the formatter below names the spans
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithMeterProvider(mp),
		otelhttp.WithPropagators(prop),
		otelhttp.WithServerName(serverName(cfg.serverAddress)),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			return r.Method + " " + pathTemplate(r.URL.Path)
		}))
}

// serverName is otelhttp's server name for the listen address addr
// (host:port, checked by newConfig): addr itself, or with none ":0", an
// empty host and a port of 0, which otelhttp leaves out rather than read
// it from the Host header.
func serverName(addr string) string {
	if addr == "" {
		return ":0"
	}
	return addr
}

// Authenticated reports whether the handler asks callers for a token.
func (h *Handler) Authenticated() bool { return len(h.tokens) > 0 }

// ServeHTTP serves one call: its span (with a tracer provider), then
// authentication, the shutdown check and the endpoint.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.served.ServeHTTP(w, r) }

func (h *Handler) serve(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="batcher"`)
		WriteError(w, &Error{Status: http.StatusUnauthorized, Type: TypeInvalidRequest, Code: "invalid_api_key",
			Message: "missing or incorrect API key: send Authorization: Bearer <token> with a configured token"})
		return
	}
	select {
	case <-h.core.Closed():
		w.Header().Set("Connection", "close")
		WriteError(w, errShuttingDown)
		return
	default:
	}
	h.route(w, h.withAccess(withConn(r)))
}

// authorized checks the bearer token against every configured one, in
// constant time: each comparison runs whatever the outcome of the others.
func (h *Handler) authorized(r *http.Request) bool {
	if len(h.tokens) == 0 {
		return true
	}
	auth := r.Header.Get("Authorization")
	const scheme = "Bearer "
	if len(auth) < len(scheme) || !strings.EqualFold(auth[:len(scheme)], scheme) {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(auth[len(scheme):])))
	ok := 0
	for i := range h.tokens {
		ok |= subtle.ConstantTimeCompare(got[:], h.tokens[i][:])
	}
	return ok == 1
}

// route dispatches by path, then method, answering unknown paths and
// methods in OpenAI's error shape (net/http's mux answers them in plain
// text).
func (h *Handler) route(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/v1/chat/completions":
		method(w, r, http.MethodPost, h.chat)
	case p == "/v1/completions":
		method(w, r, http.MethodPost, h.completions)
	case p == "/v1/embeddings":
		method(w, r, http.MethodPost, h.embeddings)
	case p == "/v1/models":
		method(w, r, http.MethodGet, h.listModels)
	case strings.HasPrefix(p, "/v1/models/"):
		method(w, r, http.MethodGet, h.getModel)
	case p == "/v1/files":
		methods(w, r, endpoint{http.MethodGet, h.listFiles, fileListParams}, endpoint{http.MethodPost, h.uploadFile, nil})
	case strings.HasPrefix(p, "/v1/files/"):
		rest := strings.TrimPrefix(p, "/v1/files/")
		if id, ok := strings.CutSuffix(rest, "/content"); ok {
			method(w, r, http.MethodGet, func(w http.ResponseWriter, r *http.Request) { h.fileContent(w, r, id) })
			return
		}
		methods(w, r,
			endpoint{http.MethodGet, func(w http.ResponseWriter, r *http.Request) { h.getFile(w, r, rest) }, nil},
			endpoint{http.MethodDelete, func(w http.ResponseWriter, r *http.Request) { h.deleteFile(w, r, rest) }, nil})
	case (p == "/v1/batches" || strings.HasPrefix(p, "/v1/batches/")) && h.cfg.batches != nil:
		h.cfg.batches.ServeHTTP(w, r)
	default:
		WriteError(w, notFound("", "unknown_url", "Invalid URL (%s %s)", r.Method, truncate(p)))
	}
}

// method serves r with serve when r's method is want (an endpoint that
// takes no query parameters); see methods.
func method(w http.ResponseWriter, r *http.Request, want string, serve http.HandlerFunc) {
	methods(w, r, endpoint{want, serve, nil})
}

// endpoint is a path's handler for one method, and the query parameters it
// reads (nil: none).
type endpoint struct {
	method string
	serve  http.HandlerFunc
	query  []string
}

// methods serves r with the endpoint of its method once its query holds
// only parameters that endpoint reads, or answers 405 with every method
// the path takes in Allow and in the message.
func methods(w http.ResponseWriter, r *http.Request, eps ...endpoint) {
	for _, ep := range eps {
		if r.Method == ep.method {
			if _, e := checkQuery(r.URL.RawQuery, r.Method+" "+truncate(r.URL.Path), ep.query...); e != nil {
				WriteError(w, e)
				return
			}
			ep.serve(w, r)
			return
		}
	}
	names := make([]string, len(eps))
	for i, ep := range eps {
		names[i] = ep.method
	}
	w.Header().Set("Allow", strings.Join(names, ", "))
	WriteError(w, &Error{Status: http.StatusMethodNotAllowed, Type: TypeInvalidRequest, Code: "method_not_allowed",
		Message: "Invalid method for URL (" + r.Method + " " + truncate(r.URL.Path) + "): want " + strings.Join(names, " or ")})
}

// pathTemplate names a path for span names without its ids.
func pathTemplate(p string) string {
	switch {
	case strings.HasPrefix(p, "/v1/files/"):
		if strings.HasSuffix(p, "/content") {
			return "/v1/files/{id}/content"
		}
		return "/v1/files/{id}"
	case strings.HasPrefix(p, "/v1/models/"):
		return "/v1/models/{id}"
	case strings.HasPrefix(p, "/v1/batches/"):
		// The Batch API's paths under it, retrieve and cancel, each a
		// template of its own as the files' are, read as the Batch API
		// routes them; any other is unknown_url.
		switch id, cancel, ok := splitBatchPath(p); {
		case !ok:
			return "unknown"
		case id == "":
			return "/v1/batches"
		case cancel:
			return "/v1/batches/{id}/cancel"
		}
		return "/v1/batches/{id}"
	}
	switch p {
	case "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/v1/files", "/v1/batches":
		return p
	}
	return "unknown"
}

// newID returns a fresh id with the given prefix, such as "chatcmpl-".
func (h *Handler) newID(prefix string) string {
	return prefix + h.idPrefix + strconv.FormatUint(h.idSeq.Add(1), 36)
}

// callOptions are what headers and service_tier say about a call.
type callOptions struct {
	priority batcher.Priority
	timeout  time.Duration
	cache    batcher.CacheMode // from Cache-Control (cachecontrol.go)
}

// stamp gives the call's requests its options and their ids: the call's
// id, suffixed by each one's index when there are several (itemID).
func (o callOptions) stamp(id string, reqs ...*batcher.Request) {
	for i, req := range reqs {
		req.ID, req.Priority, req.Timeout, req.Cache = itemID(id, i, len(reqs)), o.priority, o.timeout, o.cache
	}
}

// PriorityHeader names the header that sets a call's priority, overriding
// service_tier: urgent, high, normal, low or deferrable.
const PriorityHeader = "X-Batcher-Priority"

// TimeoutHeader names the header that bounds a call: a Go duration
// ("30s") or a number of seconds. The OpenAI SDKs send their own timeout as
// X-Stainless-Timeout, in seconds; when both are given the shorter wins.
const TimeoutHeader = "X-Batcher-Timeout"

const stainlessTimeout = "X-Stainless-Timeout"

var priorities = map[string]batcher.Priority{
	"urgent": batcher.PriorityUrgent, "high": batcher.PriorityHigh, "normal": batcher.PriorityNormal,
	"low": batcher.PriorityLow, "deferrable": batcher.PriorityDeferrable,
}

// serviceTiers maps OpenAI's service_tier onto priorities.
var serviceTiers = map[string]batcher.Priority{
	"": batcher.PriorityNormal, "auto": batcher.PriorityNormal, "default": batcher.PriorityNormal,
	"priority": batcher.PriorityHigh, "flex": batcher.PriorityLow,
}

// options reads a call's priority and timeout from its service_tier and
// headers.
func (h *Handler) options(r *http.Request, tier string) (callOptions, *Error) {
	var o callOptions
	p, ok := serviceTiers[tier]
	if !ok {
		return o, badRequest("service_tier", "must be auto, default, flex or priority, got %q", truncate(tier))
	}
	o.priority = p
	if v := r.Header.Get(PriorityHeader); v != "" {
		p, ok := priorities[strings.ToLower(strings.TrimSpace(v))]
		if !ok {
			return o, badRequest(PriorityHeader, "header %s must be urgent, high, normal, low or deferrable, got %q", PriorityHeader, truncate(v))
		}
		o.priority = p
	}
	o.cache = cacheMode(r.Header)
	o.timeout = h.cfg.defaultTimeout
	for _, name := range []string{stainlessTimeout, TimeoutHeader} {
		v := r.Header.Get(name)
		if v == "" {
			continue
		}
		d, err := parseTimeout(v)
		if err != nil {
			return o, badRequest(name, "header %s must be a positive duration (\"30s\") or number of seconds up to %v, got %q", name, MaxTimeout, truncate(v))
		}
		if o.timeout == 0 || d < o.timeout {
			o.timeout = d
		}
	}
	return o, nil
}

// parseTimeout reads a timeout header: a Go duration or a number of
// seconds, positive and at most MaxTimeout.
func parseTimeout(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	var d time.Duration
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if !(f > 0 && f <= MaxTimeout.Seconds()) {
			return 0, strconv.ErrRange
		}
		d = time.Duration(f * float64(time.Second))
	} else {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			return 0, err
		}
	}
	if d <= 0 || d > MaxTimeout {
		return 0, strconv.ErrRange
	}
	return d, nil
}

// run admits (priorityParam names what set their priority: see admit),
// submits reqs and waits for every result, returned in order. When one
// fails, the rest are cancelled and the error names its index (for arrays,
// several is true). When ctx ends first (the caller went away), every call
// is cancelled.
func (h *Handler) run(ctx context.Context, reqs []*batcher.Request, several bool, priorityParam string) ([]batcher.Result, error) {
	for _, req := range reqs {
		if err := admit(ctx, h.core, req, priorityParam); err != nil {
			return nil, err // the same for every item: no index
		}
	}
	if len(reqs) == 1 && !several {
		res, err := h.core.Do(ctx, reqs[0])
		return []batcher.Result{res}, err
	}
	calls := make([]*batcher.Call, len(reqs))
	cancelAll := func() {
		for _, c := range calls {
			if c != nil {
				c.Cancel()
			}
		}
	}
	for i, req := range reqs {
		c, err := h.core.Submit(ctx, req)
		if err != nil {
			cancelAll()
			return nil, wrapItem(i, err, several)
		}
		calls[i] = c
	}
	out := make([]batcher.Result, len(reqs))
	for i, c := range calls {
		select {
		case <-c.Done():
		case <-ctx.Done():
			cancelAll()
		}
		out[i] = c.Result()
		if out[i].Err != nil {
			cancelAll()
			return nil, wrapItem(i, out[i].Err, several)
		}
	}
	return out, nil
}

func wrapItem(i int, err error, several bool) error {
	if !several {
		return err
	}
	return &itemError{index: i, err: err}
}

// truncate keeps caller-controlled strings in messages short.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// writeJSON writes v with status 200.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = jsonEncode(w, v) // the caller may have gone
}
