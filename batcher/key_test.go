package batcher

import (
	"reflect"
	"testing"
)

// notAnswer lists the fields of a Request that do not change its answer, and
// why. Every other field, however deep, must change the Identity that dedup
// and the response cache key on: TestIdentityCoversEveryField checks it by
// reflection, so a field added to Request, Input, Message or Params fails
// it until appendIdentity encodes it or it is listed here.
var notAnswer = map[string]string{
	"Request.ID":       "the caller's id, echoed on the result",
	"Request.Route":    "the route's name, backend and model enter the Identity through the route",
	"Request.Priority": "orders work, never changes it",
	"Request.Timeout":  "bounds the wait, never changes the answer",
	"Request.Metadata": "echoed on the completion, never sent upstream",
	"Request.Dedup":    "says whether to share, not what",
	"Request.Sink":     "where events go",
	"Request.Retry":    "how often to try, not what",
	"Request.Tenant":   "keyed beside the Identity: dedupKey.tenant, CacheKey.Tenant",
	"Request.Conn":     "counts lanes against the caller's connection, never changes the answer",
	"Request.Cache":    "says whether to cache, not what",
	"Request.Stream":   "how the answer arrives, not what it is",
}

func TestIdentityCoversEveryField(t *testing.T) {
	b, err := New(
		WithBackend(BackendConfig{Name: "be", Backend: &fakeBackend{}}),
		WithRoute(Route{Name: "m", Op: OpChat, Backend: "be"}),
	)
	if err != nil {
		t.Fatal(err)
	}
	shutdownAtEnd(t, b)
	rc := (*b.routes.Load())["m"]
	base := func() *Request {
		return &Request{Route: "m", Input: Input{Op: OpChat, Messages: []Message{{Role: "user", Content: "hi"}}}}
	}
	want := identity(base(), rc)

	var walk func(path string, get func(*Request) reflect.Value, typ reflect.Type)
	walk = func(path string, get func(*Request) reflect.Value, typ reflect.Type) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			name := path + "." + f.Name
			if _, ok := notAnswer[name]; ok {
				continue
			}
			field := func(r *Request) reflect.Value { return get(r).Field(i) }
			switch {
			case f.Type.Kind() == reflect.Struct:
				walk(name, field, f.Type)
				continue
			case f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct:
				// Nil and a pointer to the zero value mean the same
				// (Request.Chat): each field of the pointee must change it.
				walk(name, func(r *Request) reflect.Value {
					p := field(r)
					if p.IsNil() {
						p.Set(reflect.New(f.Type.Elem()))
					}
					return p.Elem()
				}, f.Type.Elem())
				continue
			case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
				// One more element changes it; so does each field of the
				// base request's first element (which must have one).
				elem := func(r *Request) reflect.Value {
					s := field(r)
					if s.Len() == 0 {
						s.Set(reflect.Append(s, reflect.New(f.Type.Elem()).Elem()))
					}
					return s.Index(0)
				}
				walk(name+"[0]", elem, f.Type.Elem())
			}
			r := base()
			if !mutate(field(r)) {
				t.Errorf("%s: a %s; classify it: encode it in appendIdentity or list it in notAnswer", name, f.Type)
				continue
			}
			if identity(r, rc) == want {
				t.Errorf("%s: changing it leaves the Identity as it was: appendIdentity must encode it (or notAnswer list it, with the reason)", name)
			}
		}
	}
	walk("Request", func(r *Request) reflect.Value { return reflect.ValueOf(r).Elem() }, reflect.TypeFor[Request]())
}

// mutate changes v to another value that a caller could send; it reports
// false for a kind it does not know.
func mutate(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(v.Uint() + 1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(v.Float() + 0.5)
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
			return true // set, even to its zero value, differs from unset
		}
		return mutate(v.Elem())
	case reflect.Slice:
		e := reflect.New(v.Type().Elem()).Elem()
		if e.Kind() != reflect.Struct && !mutate(e) {
			return false
		}
		v.Set(reflect.Append(v, e))
	case reflect.Map:
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		if !mutate(k) || !mutate(e) {
			return false
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		v.SetMapIndex(k, e)
	case reflect.Struct:
		changed := false
		for i := range v.NumField() {
			if v.Field(i).CanSet() && mutate(v.Field(i)) {
				changed = true
			}
		}
		return changed
	default: // interfaces, funcs, channels: no general way to vary them
		return false
	}
	return true
}

// TestIdentityTellsApart checks cases the field walk cannot: values that
// encode alike when strings are not delimited, and the route's resolution.
func TestIdentityTellsApart(t *testing.T) {
	b, err := New(
		WithBackend(BackendConfig{Name: "be", Backend: &fakeBackend{}}),
		WithBackend(BackendConfig{Name: "be2", Backend: &fakeBackend{}}),
		WithRoute(Route{Name: "m", Op: OpChat, Backend: "be", DefaultMaxTokens: 10}),
		WithRoute(Route{Name: "m2", Op: OpChat, Backend: "be", Model: "m", DefaultMaxTokens: 10}),
		WithRoute(Route{Name: "m3", Op: OpChat, Backend: "be2", Model: "m", DefaultMaxTokens: 10}),
	)
	if err != nil {
		t.Fatal(err)
	}
	shutdownAtEnd(t, b)
	routes := *b.routes.Load()
	chat := func(msgs ...string) *Request {
		r := &Request{Input: Input{Op: OpChat}}
		for i := 0; i < len(msgs); i += 2 {
			r.Input.Messages = append(r.Input.Messages, Message{Role: msgs[i], Content: msgs[i+1]})
		}
		return r
	}
	id := func(route string, r *Request) Identity { return identity(r, routes[route]) }
	ten := int32(10)
	withMax := chat("user", "ab")
	withMax.Params.MaxTokens = ten
	for _, tc := range []struct {
		name string
		a, b Identity
		same bool
	}{
		{"split content", id("m", chat("user", "ab", "user", "c")), id("m", chat("user", "a", "user", "bc")), false},
		{"role and content", id("m", chat("user", "ab")), id("m", chat("usera", "b")), false},
		{"route", id("m", chat("user", "ab")), id("m2", chat("user", "ab")), false},
		{"backend", id("m2", chat("user", "ab")), id("m3", chat("user", "ab")), false},
		{"default max tokens is max tokens", id("m", chat("user", "ab")), id("m", withMax), true},
	} {
		if (tc.a == tc.b) != tc.same {
			t.Errorf("%s: same = %v, want %v", tc.name, tc.a == tc.b, tc.same)
		}
	}
}

// TestKeyIsAgreesWithSame holds laneKey.is, the admission path's check of
// a hot lane, to keyWith and same: for every pair of a varied set of
// requests, on every set of shared parameters, on completion and
// embedding routes and on another target or route, k.is(r) is
// k.same(keyOf(r)).
func TestKeyIsAgreesWithSame(t *testing.T) {
	b, err := New(
		WithBackend(BackendConfig{Name: "be", Backend: &fakeBackend{}}),
		WithBackend(BackendConfig{Name: "be2", Backend: &fakeBackend{}}),
		WithRoute(Route{Name: "m", Op: OpCompletion, Backend: "be", Fallbacks: []Target{{Backend: "be2"}}, DefaultMaxTokens: 10}),
		WithRoute(Route{Name: "e", Op: OpEmbedding, Backend: "be"}),
	)
	if err != nil {
		t.Fatal(err)
	}
	shutdownAtEnd(t, b)
	routes := *b.routes.Load()
	reqs := variedParams()
	for _, edit := range []func(r *Request){
		func(*Request) {},
		func(r *Request) { r.Params.MaxTokens = 10 }, // the route's default, explicit
		func(r *Request) { r.Params.Temperature = ptr(float32(0)) },
		func(r *Request) { r.Params.TopP = ptr(float32(0.9)) },
		func(r *Request) { r.Params.Seed = ptr(int64(0)) },
		func(r *Request) { r.Stream = true },
		func(r *Request) { r.MutableChat().User = "u" },
		func(r *Request) { r.Params.MutableRich().N = 2 },
		func(r *Request) { r.Params.Stop = []string{"x"} },
		func(r *Request) { r.Params.Stop = []string{"x", "y"}; r.Params.Temperature = ptr(float32(0.3)) },
	} {
		r := req("x", PriorityNormal)
		edit(r)
		reqs = append(reqs, r)
	}
	for _, shared := range []ParamSet{0, ParamSeed, ParamMaxTokens | ParamTemperature, ParamTopP | ParamStop, ParamRich, AllParams} {
		for _, route := range []string{"m", "e"} {
			rc := routes[route]
			for i := range rc.targets {
				rc.targets[i].shared = shared
			}
			for _, a := range reqs {
				for _, tg := range []uint8{0, uint8(len(rc.targets) - 1)} {
					k := keyOf(a, rc, tg)
					for _, r := range reqs {
						o := keyOf(r, rc, 0)
						if got, want := k.is(r, rc, 0), k.same(&o); got != want {
							t.Errorf("shared %b, route %s, target %d: key of %+v is %+v: %v, same says %v", shared, route, tg, a.Params, r.Params, got, want)
						}
						if k.is(r, routes["e"], 0) && rc != routes["e"] {
							t.Errorf("a key of route %s is one of route e", route)
						}
					}
				}
			}
		}
	}
}
