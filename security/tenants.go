package security

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/batcherhq/batcher/batcher"
)

// Limits of the tenants file.
const (
	// MaxTenantsFileBytes bounds the tenants file.
	MaxTenantsFileBytes = 4 << 20
	// MaxWeight bounds a tenant's weight.
	MaxWeight = 1000
	// TokenHashPrefix starts every token hash in the tenants file.
	TokenHashPrefix = "sha256:"
	// MinTokenBytes is the shortest bearer token accepted: shorter ones
	// cannot carry the 128 bits of entropy that make an unsalted SHA-256
	// safe to store.
	MinTokenBytes = 22
	// MaxTokenBytes bounds a presented bearer token or JWT.
	MaxTokenBytes = 8 << 10
	// MaxQuota bounds each counted quota (rpm, tpm, in_flight, jobs,
	// items_per_job).
	MaxQuota = 1_000_000_000
)

// HashToken returns the form in which the tenants file stores a bearer
// token: "sha256:" and the hex SHA-256 of the token. Tokens must be random
// with at least 128 bits of entropy (for example 32 random bytes in
// base64url): the hash is unsalted, which is safe only for such tokens.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return TokenHashPrefix + hex.EncodeToString(sum[:])
}

// Tenants is one parsed tenants file: the tenants and the credentials that
// map to them. It is immutable; a reload replaces it whole.
type Tenants struct {
	list      []*Tenant
	byName    map[string]*Tenant
	byToken   map[[sha256.Size]byte]tokenEntry
	byJWT     map[string]*Tenant
	bySPIFFE  map[string]*Tenant
	bySubject map[string]*Tenant
}

// Names returns the tenants' names in file order.
func (ts *Tenants) Names() []string {
	names := make([]string, len(ts.list))
	for i, t := range ts.list {
		names[i] = t.Name
	}
	return names
}

// Policies returns the tenants' weights and the quotas the core enforces
// (rpm, tpm, queue_share, in_flight), for batcher.Batcher.SetTenants.
func (ts *Tenants) Policies() []batcher.TenantPolicy {
	ps := make([]batcher.TenantPolicy, len(ts.list))
	for i, t := range ts.list {
		q := t.Quotas
		ps[i] = batcher.TenantPolicy{Name: t.Name, Weight: t.Weight, Quotas: batcher.TenantQuotas{
			RPM: q.RPM, TPM: q.TPM, QueueShare: q.QueueShare, InFlight: q.InFlight}}
	}
	return ps
}

// Tenant returns the tenant of that name, or nil.
func (ts *Tenants) Tenant(name string) *Tenant { return ts.byName[name] }

// byBearer returns the tenant whose token hash is the presented token's,
// or nil. The map is keyed by the SHA-256 of the token, so its lookup's
// timing can tell an attacker about the hash of what they sent, never
// about a stored token (finding a token from its hash is a preimage
// attack); the final comparison is in constant time all the same.
func (ts *Tenants) byBearer(token string) *Tenant {
	sum := sha256.Sum256([]byte(token))
	e, ok := ts.byToken[sum]
	if !ok || subtle.ConstantTimeCompare(e.sum[:], sum[:]) != 1 {
		return nil
	}
	return e.t
}

// tokenEntry is a stored token hash and its tenant. The Tenant handed to
// handlers carries no credential.
type tokenEntry struct {
	sum [sha256.Size]byte
	t   *Tenant
}

// tenantSpec is one tenant as the file spells it.
type tenantSpec struct {
	Name         string   `yaml:"name"`
	Tokens       []string `yaml:"tokens"`
	JWTSubjects  []string `yaml:"jwt_subjects"`
	SPIFFEIDs    []string `yaml:"spiffe_ids"`
	CertSubjects []string `yaml:"cert_subjects"`
	Routes       []string `yaml:"routes"`
	MaxPriority  string   `yaml:"max_priority"`
	PriorityMode string   `yaml:"priority_mode"`
	Weight       int      `yaml:"weight"`
	Admin        bool     `yaml:"admin"`
	Quotas       Quotas   `yaml:"quotas"`
}

type tenantsFile struct {
	Tenants []tenantSpec `yaml:"tenants"`
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

var priorities = map[string]batcher.Priority{
	"urgent": batcher.PriorityUrgent, "high": batcher.PriorityHigh, "normal": batcher.PriorityNormal,
	"low": batcher.PriorityLow, "deferrable": batcher.PriorityDeferrable,
}

// ParseTenants reads a tenants file. Every error names the field at fault
// and never echoes a token or a token hash. A file with any error is
// refused whole.
func ParseTenants(data []byte) (*Tenants, error) {
	f, err := decodeTenants(data)
	if err != nil {
		return nil, err
	}
	ts := &Tenants{
		byName:    map[string]*Tenant{},
		byToken:   map[[sha256.Size]byte]tokenEntry{},
		byJWT:     map[string]*Tenant{},
		bySPIFFE:  map[string]*Tenant{},
		bySubject: map[string]*Tenant{},
	}
	var errs fieldErrs
	for i := range f.Tenants {
		s := &f.Tenants[i]
		path := fmt.Sprintf("tenants[%d]", i)
		t := &Tenant{Name: s.Name, Routes: s.Routes, Weight: s.Weight, Admin: s.Admin, Quotas: s.Quotas, MaxPriority: batcher.PriorityUrgent}
		ts.addName(path, t, &errs)
		ts.addCredentials(path, s, t, &errs)
		s.checkPolicy(path, t, &errs)
		if len(s.Tokens)+len(s.JWTSubjects)+len(s.SPIFFEIDs)+len(s.CertSubjects) == 0 {
			errs.add(path, "has no credential: give tokens, jwt_subjects, spiffe_ids or cert_subjects")
		}
		t.access = t.newAccess()
		ts.list = append(ts.list, t)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return ts, nil
}

// fieldErrs collects a tenants file's errors, each naming its path.
type fieldErrs []error

func (e *fieldErrs) add(path, format string, args ...any) {
	*e = append(*e, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

// decodeTenants reads a tenants file that holds at least one tenant.
func decodeTenants(data []byte) (*tenantsFile, error) {
	if len(data) > MaxTenantsFileBytes {
		return nil, fmt.Errorf("tenants file: larger than %d bytes", MaxTenantsFileBytes)
	}
	var f tenantsFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("tenants file: empty; want a tenants: list")
		}
		return nil, fmt.Errorf("tenants file: %s", scrubYAML(err))
	}
	if len(f.Tenants) == 0 {
		return nil, errors.New("tenants: at least one tenant is needed")
	}
	return &f, nil
}

// addName indexes t by its name, when the name is valid and free.
func (ts *Tenants) addName(path string, t *Tenant, errs *fieldErrs) {
	switch {
	case !nameRE.MatchString(t.Name):
		errs.add(path+".name", "must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit, got %q", t.Name)
	case ts.byName[t.Name] != nil:
		errs.add(path+".name", "%q names two tenants", t.Name)
	case t.Name == AnonymousName:
		errs.add(path+".name", "%q is reserved", t.Name)
	default:
		ts.byName[t.Name] = t
	}
}

// addCredentials indexes t by each of s's credentials: token hashes, JWT
// subjects, SPIFFE ids and certificate subjects, each mapped to one tenant
// only.
func (ts *Tenants) addCredentials(path string, s *tenantSpec, t *Tenant, errs *fieldErrs) {
	for j, h := range s.Tokens {
		p := fmt.Sprintf("%s.tokens[%d]", path, j)
		sum, ok := parseTokenHash(h)
		if !ok {
			errs.add(p, "must be %s followed by 64 hex digits (the SHA-256 of the token); the value is not shown", TokenHashPrefix)
			continue
		}
		if _, dup := ts.byToken[sum]; dup {
			errs.add(p, "the same token hash is listed twice")
			continue
		}
		ts.byToken[sum] = tokenEntry{sum, t}
	}
	mapOnce := func(field string, values []string, by map[string]*Tenant, check func(string) error) {
		for j, v := range values {
			p := fmt.Sprintf("%s.%s[%d]", path, field, j)
			if err := check(v); err != nil {
				errs.add(p, "%v", err)
			} else if o := by[v]; o != nil {
				errs.add(p, "%q is already mapped to tenant %q", v, o.Name)
			} else {
				by[v] = t
			}
		}
	}
	mapOnce("jwt_subjects", s.JWTSubjects, ts.byJWT, notEmpty)
	mapOnce("spiffe_ids", s.SPIFFEIDs, ts.bySPIFFE, checkSPIFFEID)
	mapOnce("cert_subjects", s.CertSubjects, ts.bySubject, notEmpty)
}

var errEmpty = errors.New("must not be empty")

func notEmpty(v string) error {
	if v == "" {
		return errEmpty
	}
	return nil
}

// checkPolicy checks s's routes, priority ceiling and mode, weight and
// quotas, and sets t's resolved values.
func (s *tenantSpec) checkPolicy(path string, t *Tenant, errs *fieldErrs) {
	for j, r := range s.Routes {
		if r == "" {
			errs.add(fmt.Sprintf("%s.routes[%d]", path, j), "must not be empty")
		}
	}
	if s.MaxPriority != "" {
		p, ok := priorities[strings.ToLower(s.MaxPriority)]
		if !ok {
			errs.add(path+".max_priority", "must be urgent, high, normal, low or deferrable, got %q", s.MaxPriority)
		}
		t.MaxPriority = p
	}
	switch strings.ToLower(s.PriorityMode) {
	case "", "lower":
		t.PriorityMode = PriorityLower
	case "refuse":
		t.PriorityMode = PriorityRefuse
	default:
		errs.add(path+".priority_mode", "must be lower or refuse, got %q", s.PriorityMode)
	}
	switch {
	case s.Weight == 0:
		t.Weight = 1
	case s.Weight < 1 || s.Weight > MaxWeight:
		errs.add(path+".weight", "must be 1 to %d, got %d", MaxWeight, s.Weight)
	}
	q := s.Quotas
	for _, v := range []struct {
		name string
		n    int
	}{{"rpm", q.RPM}, {"tpm", q.TPM}, {"in_flight", q.InFlight}, {"jobs", q.Jobs}, {"items_per_job", q.ItemsPerJob}} {
		if v.n < 0 || v.n > MaxQuota {
			errs.add(path+".quotas."+v.name, "must be 0 (no quota) to %d, got %d", MaxQuota, v.n)
		}
	}
	if !(q.QueueShare >= 0 && q.QueueShare <= 1) { // NaN too
		errs.add(path+".quotas.queue_share", "must be 0 (no quota) to 1, got %v", q.QueueShare)
	}
}

func parseTokenHash(s string) ([sha256.Size]byte, bool) {
	var sum [sha256.Size]byte
	h, ok := strings.CutPrefix(s, TokenHashPrefix)
	if !ok || len(h) != hex.EncodedLen(sha256.Size) {
		return sum, false
	}
	if _, err := hex.Decode(sum[:], []byte(h)); err != nil {
		return sum, false
	}
	return sum, true
}

// checkSPIFFEID checks the shape of a SPIFFE ID: spiffe://trust-domain/path,
// with no port, user, query or fragment.
func checkSPIFFEID(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "spiffe" || u.Host == "" || u.Port() != "" || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || strings.ContainsAny(u.Host, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
		return fmt.Errorf("must be a SPIFFE ID, spiffe://trust-domain/path (lower-case trust domain, no port, query or fragment), got %q", s)
	}
	return nil
}

// yamlValueRE matches the values yaml.v3 quotes in its errors.
var yamlValueRE = regexp.MustCompile("`[^`]*`")

// scrubYAML returns a YAML error's text with the values it quotes removed:
// a misplaced token must not reach a log.
func scrubYAML(err error) string {
	return yamlValueRE.ReplaceAllString(err.Error(), "(value not shown)")
}
