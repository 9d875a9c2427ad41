package jsonscan

import (
	"encoding/json"
	"strconv"
	"sync"
	"unicode/utf8"
)

// linearKeys is how many keys an object may hold before RepeatedKey looks
// its keys up in a map rather than comparing each new one with those before
// it: most objects of a request are this small, and a map per object would
// cost more than the comparisons; a large one (a logit_bias, a schema's
// properties) would cost n² comparisons.
const linearKeys = 16

// RepeatedKey returns where b, a JSON text, first repeats a key within one
// object (in the text's order), as a path from the top: "model",
// "messages[0].content", "[2].a". Keys are compared as encoding/json
// decodes them (escapes decoded, bytes that are not UTF-8 replaced), so
// "a" and "\u0061" are the same key. encoding/json keeps the last value of
// a repeated key and drops the others unseen; a caller that must not drop
// what was sent refuses the text instead.
//
// found is false when no key repeats, and also when b is not a JSON text
// nested at most maxDepth levels: that is for a full decoder to describe.
func RepeatedKey(b []byte, maxDepth int) (path string, found bool) {
	r := repeatScans.Get().(*repeatScan)
	defer r.release()
	r.Scanner = New(b)
	// The walk stops at the first repeat; the rest of the text must be
	// JSON too (checked only then, off the common path).
	if r.value(maxDepth) || !r.found || !json.Valid(b) {
		return "", false
	}
	return r.pathString(), true
}

// repeatScans keep the walks' stacks between calls: RepeatedKey is on
// the path of every request of the OpenAI front door, and allocates
// nothing there once its stacks have grown to a usual request's.
var repeatScans = sync.Pool{New: func() any { return new(repeatScan) }}

// maxKeptKeys bounds the stack of keys a pooled walk keeps.
const maxKeptKeys = 1024

// release returns r to the pool, holding no slice of the text it read.
func (r *repeatScan) release() {
	if cap(r.keys) > maxKeptKeys {
		return
	}
	clear(r.keys[:cap(r.keys)])
	clear(r.path[:cap(r.path)])
	r.Scanner, r.keys, r.path, r.found = Scanner{}, r.keys[:0], r.path[:0], false
	repeatScans.Put(r)
}

// repeatScan walks a text for RepeatedKey. keys holds the keys of every
// object being read, outermost first, each object's from where it began;
// path names the value being read.
type repeatScan struct {
	Scanner
	keys  [][]byte
	path  []pathStep
	found bool
}

// pathStep is one step of a path: an object's key, or an array's index.
type pathStep struct {
	key     []byte
	index   int
	inArray bool
}

// value reads one value; false ends the walk (a repeat found, or text it
// cannot read), leaving path at the value at fault.
func (r *repeatScan) value(maxDepth int) bool {
	if maxDepth < 0 {
		return false
	}
	switch r.Peek() {
	case '{':
		return r.object(maxDepth - 1)
	case '[':
		r.path = append(r.path, pathStep{inArray: true})
		at := len(r.path) - 1
		n := 0
		if !r.Array(func() bool {
			r.path[at].index = n
			n++
			return r.value(maxDepth - 1)
		}) {
			return false
		}
		r.path = r.path[:at]
		return true
	}
	return r.Skip(0)
}

// object reads one object, checking each key against those before it.
func (r *repeatScan) object(maxDepth int) bool {
	if !r.Next('{') {
		return false
	}
	start := len(r.keys)
	r.path = append(r.path, pathStep{})
	at := len(r.path) - 1
	var seen map[string]struct{} // past linearKeys keys
	if !r.Next('}') {
		for {
			key, ok := r.key()
			if !ok || !r.Next(':') {
				return false
			}
			r.path[at].key = key
			if r.repeats(key, r.keys[start:], &seen) {
				r.found = true
				return false
			}
			r.keys = append(r.keys, key)
			if !r.value(maxDepth) {
				return false
			}
			if r.Next(',') {
				continue
			}
			if !r.Next('}') {
				return false
			}
			break
		}
	}
	r.keys, r.path = r.keys[:start], r.path[:at]
	return true
}

// key reads an object's key as encoding/json decodes it: a slice of the
// text when it holds no escape and is UTF-8, else decoded.
func (r *repeatScan) key() ([]byte, bool) {
	raw, esc, ok := r.RawString()
	if !ok || (!esc && utf8.Valid(raw)) {
		return raw, ok
	}
	var s string
	if json.Unmarshal(r.b[r.i-len(raw)-2:r.i], &s) != nil {
		return nil, false
	}
	return []byte(s), true
}

// repeats reports whether key is among before, an object's earlier keys,
// and adds it to *seen once there are more than linearKeys of them.
func (r *repeatScan) repeats(key []byte, before [][]byte, seen *map[string]struct{}) bool {
	if len(before) < linearKeys {
		for _, k := range before {
			if string(k) == string(key) {
				return true
			}
		}
		return false
	}
	if *seen == nil {
		*seen = make(map[string]struct{}, 2*len(before))
		for _, k := range before {
			(*seen)[string(k)] = struct{}{}
		}
	}
	if _, ok := (*seen)[string(key)]; ok {
		return true
	}
	(*seen)[string(key)] = struct{}{}
	return false
}

// pathString renders path: keys joined by dots, indexes in brackets.
func (r *repeatScan) pathString() string {
	var b []byte
	for _, p := range r.path {
		if p.inArray {
			b = append(strconv.AppendInt(append(b, '['), int64(p.index), 10), ']')
			continue
		}
		if len(b) > 0 {
			b = append(b, '.')
		}
		b = append(b, p.key...)
	}
	return string(b)
}
