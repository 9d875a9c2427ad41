package schema

import (
	"encoding/json"
	"slices"
)

// Instance returns JSON that a schema (a JSON object; nil: {}) describes,
// derived from seed, with strings taken from hint's words (at least one):
// what the simulators answer for a tool's arguments or a response format.
// It handles the subset of JSON Schema that strict structured outputs use
// (type, properties, items, enum, const, anyOf, bounds); the caller checks
// the result with Validate.
func Instance(schema []byte, seed uint64, hint []string) ([]byte, error) {
	if schema == nil {
		return []byte("{}"), nil
	}
	if len(hint) == 0 {
		hint = []string{"sim"}
	}
	var s any
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, err
	}
	g := gen{x: seed, hint: hint}
	return json.Marshal(g.value(s, 0))
}

// gen generates JSON values from a schema: the first of enum or const,
// every property of an object (so that strict schemas, which require them
// all, are met), one item of an array (or minItems), numbers within
// minimum and maximum, strings from the generated text's words.
type gen struct {
	x    uint64
	hint []string
}

func (g *gen) next() uint64 { g.x = splitmix64(g.x); return g.x }

const maxSchemaDepth = 16

func (g *gen) value(s any, depth int) any {
	m, ok := s.(map[string]any)
	if !ok || depth > maxSchemaDepth {
		return nil
	}
	if c, ok := m["const"]; ok {
		return c
	}
	if e, ok := m["enum"].([]any); ok && len(e) > 0 {
		return e[g.next()%uint64(len(e))]
	}
	for _, k := range [...]string{"anyOf", "oneOf", "allOf"} {
		if alts, ok := m[k].([]any); ok && len(alts) > 0 {
			return g.value(alts[0], depth+1)
		}
	}
	typ, _ := m["type"].(string)
	if ts, ok := m["type"].([]any); ok {
		for _, t := range ts {
			if t, _ := t.(string); t != "null" {
				typ = t
				break
			}
		}
	}
	if typ == "" {
		if _, ok := m["properties"]; ok {
			typ = "object"
		}
	}
	switch typ {
	case "object":
		props, _ := m["properties"].(map[string]any)
		keys := make([]string, 0, len(props))
		for k := range props {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		obj := make(map[string]any, len(keys))
		for _, k := range keys {
			obj[k] = g.value(props[k], depth+1)
		}
		return obj
	case "array":
		n := 1
		if mi, ok := m["minItems"].(float64); ok && mi > 1 {
			n = min(int(mi), 8)
		}
		if mx, ok := m["maxItems"].(float64); ok && int(mx) < n {
			n = int(mx)
		}
		arr := make([]any, n)
		for i := range arr {
			arr[i] = g.value(m["items"], depth+1)
		}
		return arr
	case "integer", "number":
		lo, hi := 0.0, 100.0
		if v, ok := m["minimum"].(float64); ok {
			lo = v
			hi = max(hi, lo+100)
		}
		if v, ok := m["maximum"].(float64); ok {
			hi = v
		}
		if hi < lo {
			hi = lo
		}
		v := lo + float64(g.next()%uint64(hi-lo+1))
		if typ == "number" && v < hi {
			v += 0.5
		}
		return v
	case "boolean":
		return g.next()%2 == 0
	case "null":
		return nil
	}
	// A string, or a schema that says nothing: a word of the answer.
	s2 := g.hint[g.next()%uint64(len(g.hint))]
	if ml, ok := m["minLength"].(float64); ok {
		for len(s2) < int(ml) {
			s2 += " " + g.hint[g.next()%uint64(len(g.hint))]
		}
	}
	if ml, ok := m["maxLength"].(float64); ok && len(s2) > int(ml) {
		s2 = s2[:int(ml)]
	}
	return s2
}

// splitmix64 is a fast, well-mixed step for deriving a stream of values
// from one seed.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
