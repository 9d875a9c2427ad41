package security

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"

	"github.com/batcherhq/batcher/internal/filewatch"
)

// Defaults of JWTConfig.
const (
	DefaultJWTTenantClaim     = "sub"
	DefaultJWKSRefresh        = 10 * time.Minute
	DefaultJWTLeeway          = 30 * time.Second
	DefaultJWKSUnknownKIDWait = time.Minute
	// MaxJWKSBytes bounds a JWKS document, from a file or a URL.
	MaxJWKSBytes = 1 << 20
	// jwksFetchTimeout bounds the fetch a token with an unknown kid
	// triggers.
	jwksFetchTimeout = 5 * time.Second
	// jwtCacheSize bounds the verified-token cache.
	jwtCacheSize = 4096
	// jwtCacheTTL bounds how long a verified token skips the signature
	// check: a key removed from the JWKS stops working within it.
	jwtCacheTTL = time.Minute
)

// jwtAlgorithms are the signing algorithms accepted: asymmetric only, so
// that a JWKS's public key can never be used as an HMAC secret, and never
// "none".
var jwtAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// JWTConfig says how JWTs are verified. Exactly one of JWKSFile and JWKSURL
// is set.
type JWTConfig struct {
	// JWKSFile is a JWK Set file, reloaded when it changes.
	JWKSFile string
	// JWKSURL is fetched at start (a failure fails New: batcherd does not
	// start without keys), then every Refresh, keeping the last good set
	// when a refresh fails, and at once (at most every UnknownKIDEvery) when
	// a token names a key it does not hold. Responses are bounded by
	// MaxJWKSBytes.
	JWKSURL string
	// Issuer and Audience, when set, must match the iss and aud claims.
	Issuer   string
	Audience string
	// TenantClaim is the string claim mapped to a tenant through its
	// jwt_subjects. Default DefaultJWTTenantClaim.
	TenantClaim string
	// Refresh is how often the JWKS URL is fetched. Default DefaultJWKSRefresh.
	Refresh time.Duration
	// UnknownKIDEvery bounds the fetches a token with an unknown key id
	// triggers. Default DefaultJWKSUnknownKIDWait.
	UnknownKIDEvery time.Duration
	// Leeway is the clock skew allowed on exp and nbf. Default DefaultJWTLeeway.
	Leeway time.Duration
	// HTTPClient fetches the JWKS URL. Default: a client with a 10 s timeout.
	HTTPClient *http.Client
}

// jwtVerifier checks JWTs and returns the tenant claim.
type jwtVerifier struct {
	cfg    JWTConfig
	parser *jwt.Parser
	keys   atomic.Pointer[keyfunc.Keyfunc]
	cancel context.CancelFunc // ends the JWKS URL's refresh goroutine

	mu   sync.Mutex // serializes reloadFile; guards file
	file filewatch.Set

	cache   jwtCache
	noCache bool // benchmarks: verify every token
}

func newJWTVerifier(cfg JWTConfig) (*jwtVerifier, error) {
	if (cfg.JWKSFile == "") == (cfg.JWKSURL == "") {
		return nil, errors.New("jwt: set exactly one of a JWKS file and a JWKS URL")
	}
	if cfg.TenantClaim == "" {
		cfg.TenantClaim = DefaultJWTTenantClaim
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultJWKSRefresh
	}
	if cfg.UnknownKIDEvery <= 0 {
		cfg.UnknownKIDEvery = DefaultJWKSUnknownKIDWait
	}
	if cfg.Leeway == 0 {
		cfg.Leeway = DefaultJWTLeeway
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(jwtAlgorithms),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(cfg.Leeway),
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	v := &jwtVerifier{cfg: cfg, parser: jwt.NewParser(opts...), file: filewatch.New(cfg.JWKSFile)}
	v.cache.m = map[[sha256.Size]byte]jwtCached{}
	if cfg.JWKSFile != "" {
		if _, err := v.reloadFile(true); err != nil {
			return nil, err
		}
		return v, nil
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	limited := *client
	limited.Transport = limitBody{next: client.Transport}
	ctx, cancel := context.WithCancel(context.Background())
	noErrFirst := false
	kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{cfg.JWKSURL}, keyfunc.Override{
		Client:            &limited,
		RefreshInterval:   cfg.Refresh,
		RefreshUnknownKID: rate.NewLimiter(rate.Every(cfg.UnknownKIDEvery), 1),
		// Bounds an unknown kid's wait for the limiter and its fetch. The
		// limiter does not wait when its next token is further off than
		// this: it fails at once, so tokens with made-up kids cost nothing.
		RateLimitWaitMax:          jwksFetchTimeout,
		NoErrorReturnFirstHTTPReq: &noErrFirst,
		RefreshErrorHandlerFunc: func(string) func(context.Context, error) {
			return func(context.Context, error) {} // the next refresh retries; verification errors say enough
		},
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("jwt: JWKS URL: %w", err)
	}
	v.keys.Store(&kf)
	v.cancel = cancel
	return v, nil
}

// reloadFile reloads the JWKS file when it changed. A bad new file is
// refused and the old keys stay.
func (v *jwtVerifier) reloadFile(force bool) (bool, error) {
	if v.cfg.JWKSFile == "" {
		return false, nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	stamps, load, err := v.file.Changed(force)
	if err != nil {
		return false, fmt.Errorf("jwt: %w", err)
	}
	if !load {
		return false, nil
	}
	kf, err := v.loadFile()
	v.file.Done(stamps, err)
	if err != nil {
		return false, err
	}
	v.keys.Store(&kf)
	v.cache.clear()
	return true, nil
}

func (v *jwtVerifier) loadFile() (keyfunc.Keyfunc, error) {
	data, err := readLimited(v.cfg.JWKSFile, MaxJWKSBytes)
	if err != nil {
		return nil, fmt.Errorf("jwt: %w", err)
	}
	kf, err := parseJWKS(data)
	if err != nil {
		return nil, fmt.Errorf("jwt: JWKS file %s: %w", v.cfg.JWKSFile, err)
	}
	return kf, nil
}

// parseJWKS reads a JWK Set document; one without a usable key is an error.
func parseJWKS(data []byte) (keyfunc.Keyfunc, error) {
	var probe struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, errors.New("not a JWK Set (want a JSON object with a keys array)")
	}
	kf, err := keyfunc.NewJWKSetJSON(data)
	if err != nil {
		return nil, errors.New("not a valid JWK Set")
	}
	keys, err := kf.Storage().KeyReadAll(context.Background())
	if err != nil || len(keys) == 0 {
		return nil, errors.New("no usable key in the JWK Set")
	}
	return kf, nil
}

func (v *jwtVerifier) close() {
	if v.cancel != nil {
		v.cancel()
	}
}

// verify checks a JWT's signature, algorithm, expiry, not-before, issuer
// and audience, and returns its tenant claim. A token verified in the last
// jwtCacheTTL is not verified again until then (or its expiry).
func (v *jwtVerifier) verify(ctx context.Context, raw string) (string, error) {
	key := sha256.Sum256([]byte(raw))
	now := time.Now()
	if sub, ok := v.cache.get(key, now); ok && !v.noCache {
		return sub, nil
	}
	claims := jwt.MapClaims{}
	kf := *v.keys.Load()
	if _, err := v.parser.ParseWithClaims(raw, claims, kf.KeyfuncCtx(ctx)); err != nil {
		return "", err
	}
	sub, ok := claims[v.cfg.TenantClaim].(string)
	if !ok || sub == "" {
		return "", fmt.Errorf("claim %q missing or not a string", v.cfg.TenantClaim)
	}
	until := now.Add(jwtCacheTTL)
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil && exp.Before(until) {
		until = exp.Time
	}
	v.cache.put(key, jwtCached{sub: sub, until: until})
	return sub, nil
}

type jwtCached struct {
	sub   string
	until time.Time
}

// jwtCache holds recently verified tokens by their SHA-256 (never the
// token itself), bounded: when full it is emptied.
type jwtCache struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]jwtCached
}

func (c *jwtCache) get(k [sha256.Size]byte, now time.Time) (string, bool) {
	c.mu.Lock()
	e, ok := c.m[k]
	c.mu.Unlock()
	if !ok || !now.Before(e.until) {
		return "", false
	}
	return e.sub, true
}

func (c *jwtCache) put(k [sha256.Size]byte, e jwtCached) {
	c.mu.Lock()
	if len(c.m) >= jwtCacheSize {
		clear(c.m)
	}
	c.m[k] = e
	c.mu.Unlock()
}

func (c *jwtCache) clear() {
	c.mu.Lock()
	clear(c.m)
	c.mu.Unlock()
}

// looksLikeJWT: three base64url parts.
func looksLikeJWT(s string) bool { return strings.Count(s, ".") == 2 }

// limitBody bounds the JWKS responses read.
type limitBody struct{ next http.RoundTripper }

func (l limitBody) RoundTrip(r *http.Request) (*http.Response, error) {
	next := l.next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &limitedBody{rc: resp.Body, left: MaxJWKSBytes}
	return resp, nil
}

type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("JWKS response larger than %d bytes", MaxJWKSBytes)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

func readLimited(name string, limit int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read only
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, limit)
	}
	return data, nil
}
