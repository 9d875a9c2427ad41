package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// EnvPrefix begins the name of every environment variable batcherd reads.
const EnvPrefix = "BATCHER_"

// maxTypoDistance is how far (in edits: a letter added, dropped, changed,
// or two neighbours swapped) a BATCHER_* name may be from a known one to be
// taken for a typo of it.
const maxTypoDistance = 2

// CheckEnviron looks at the names of the BATCHER_* variables in environ
// (os.Environ's form, KEY=value) that batcherd does not read: neither a
// setting's variable, nor BATCHER_CONFIG, nor a variable c names
// (api_key_env, tokens_env). Such a variable within two edits of a known
// one is a typo that would otherwise be silently ignored, as an unknown key
// of the file would be: it fails, naming the variable and the one it is
// nearest to. Any other is warned about and left alone, since the prefix
// is shared with the project's own test and benchmark knobs
// (BATCHER_REQUIRE_SERVICES and the like) that CI passes down to every
// process it starts.
func (c *Config) CheckEnviron(environ []string) (warnings []string, err error) {
	known := knownEnv(c)
	var e errs
	var names []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, EnvPrefix) && !known[name] {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		near, d := nearestEnv(name, known)
		if d <= maxTypoDistance {
			e.add(name, "unknown environment variable: did you mean %s? (batcherd --help lists every variable)", near)
			continue
		}
		// Too far from every known name for a nearest one to help.
		warnings = append(warnings, fmt.Sprintf("%s: unknown environment variable, ignored (batcherd --help lists every variable)", name))
	}
	return warnings, errors.Join(e...)
}

// knownEnv is the set of variables batcherd reads, given c.
func knownEnv(c *Config) map[string]bool {
	known := map[string]bool{EnvConfig: true}
	for _, s := range settings {
		known[s.env] = true
	}
	if c.HTTP.TokensEnv != "" {
		known[c.HTTP.TokensEnv] = true
	}
	for _, b := range c.Backends {
		if b.OpenAI != nil && b.OpenAI.APIKeyEnv != "" {
			known[b.OpenAI.APIKeyEnv] = true
		}
		if b.Anthropic != nil && b.Anthropic.APIKeyEnv != "" {
			known[b.Anthropic.APIKeyEnv] = true
		}
	}
	return known
}

// nearestEnv is the known name nearest to name and its distance; ties go
// to the first in order.
func nearestEnv(name string, known map[string]bool) (string, int) {
	best, bestD := "", -1
	for k := range known {
		d := editDistance(strings.TrimPrefix(name, EnvPrefix), strings.TrimPrefix(k, EnvPrefix))
		if bestD < 0 || d < bestD || (d == bestD && k < best) {
			best, bestD = k, d
		}
	}
	return best, bestD
}

// editDistance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions and swaps of neighbours.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
