package batcher

import (
	"hash/fnv"
	"strconv"
	"strings"
)

// laneKey says which requests may share a batch: same route and target,
// and the same generation parameters among those the target's backend
// shares across a batch (ParamSharer; all of them by default). Embedding
// lanes ignore generation parameters; a fan-out backend's lanes too.
type laneKey struct {
	route     string
	rc        *routeConfig // the route's settings: SetRoutes' new settings get new lanes
	target    uint8        // index in the route's targets: 0 its backend, then fallbacks
	maxTokens int32
	temp      float32
	topP      float32
	seed      int64
	set       uint8 // which of temp, topP, seed are set
	stop      string
	stream    bool   // streamed requests: batches of one (stream.go)
	rich      string // richKey: empty for a plain request
}

// same is k == *o, cheapest fields first, and the route's name not
// compared: the same rc is the same route. Each admission calls it, and
// most keys have neither stop nor rich: those are compared without a call
// to memequal.
func (k *laneKey) same(o *laneKey) bool {
	return k.rc == o.rc && k.target == o.target && k.stream == o.stream && k.maxTokens == o.maxTokens && k.set == o.set &&
		k.temp == o.temp && k.topP == o.topP && k.seed == o.seed &&
		(len(k.stop)|len(k.rich)|len(o.stop)|len(o.rich) == 0 || k.stop == o.stop && k.rich == o.rich)
}

const (
	setTemp uint8 = 1 << iota
	setTopP
	setSeed
)

func keyOf(r *Request, rc *routeConfig, target uint8) laneKey {
	return keyWith(r, rc, target, rc.targets[target].shared)
}

// keyWith is r's lane key on target counting the parameters in shared.
func keyWith(r *Request, rc *routeConfig, target uint8, shared ParamSet) laneKey {
	k := laneKey{route: rc.Name, rc: rc, target: target}
	if rc.Op == OpEmbedding {
		return k
	}
	if r.Stream {
		// Alone upstream: no parameter needs a lane of its own.
		k.stream = true
		return k
	}
	p := &r.Params
	if shared.Has(ParamMaxTokens) {
		k.maxTokens = p.MaxTokens
		if k.maxTokens == 0 {
			k.maxTokens = rc.DefaultMaxTokens
		}
	}
	if p.Temperature != nil && shared.Has(ParamTemperature) {
		k.temp, k.set = *p.Temperature, k.set|setTemp
	}
	if p.TopP != nil && shared.Has(ParamTopP) {
		k.topP, k.set = *p.TopP, k.set|setTopP
	}
	if p.Seed != nil && shared.Has(ParamSeed) {
		k.seed, k.set = *p.Seed, k.set|setSeed
	}
	if len(p.Stop) > 0 && shared.Has(ParamStop) {
		k.stop = strings.Join(p.Stop, "\x00")
	}
	if shared.Has(ParamRich) && r.mayBeRich() { // inlined: a plain request makes no call
		k.rich = richKey(r)
	}
	return k
}

// is reports whether k is r's lane key on target: k.same(keyOf(r, rc,
// target)), without building the key for a plain request (no stop
// sequences, nothing rich, not streamed), so that the admission path's
// check of its target's hot lane copies nothing. It decides the way
// keyWith does, field by field; TestKeyIsAgreesWithSame holds them
// together.
func (k *laneKey) is(r *Request, rc *routeConfig, target uint8) bool {
	if k.rc != rc || k.target != target {
		return false
	}
	shared := rc.targets[target].shared
	p := &r.Params
	if rc.Op == OpEmbedding || r.Stream || len(p.Stop) > 0 || r.mayBeRich() {
		o := keyWith(r, rc, target, shared)
		return k.same(&o)
	}
	if k.stream || len(k.stop)|len(k.rich) != 0 {
		return false
	}
	var maxTokens int32
	if shared.Has(ParamMaxTokens) {
		maxTokens = p.MaxTokens
		if maxTokens == 0 {
			maxTokens = rc.DefaultMaxTokens
		}
	}
	var set uint8
	var temp, topP float32
	var seed int64
	if p.Temperature != nil && shared.Has(ParamTemperature) {
		temp, set = *p.Temperature, set|setTemp
	}
	if p.TopP != nil && shared.Has(ParamTopP) {
		topP, set = *p.TopP, set|setTopP
	}
	if p.Seed != nil && shared.Has(ParamSeed) {
		seed, set = *p.Seed, set|setSeed
	}
	return k.maxTokens == maxTokens && k.set == set && k.temp == temp && k.topP == topP && k.seed == seed
}

// name is the lane's name in events: the route, then its parameters.
func (k laneKey) name(op Operation, backend string) string {
	if op == OpEmbedding {
		return k.route + "@" + backend
	}
	if k.stream {
		return k.route + "@" + backend + "{stream}"
	}
	var params []string
	if k.maxTokens != 0 { // 0: max_tokens is not shared on this target
		params = append(params, "max_tokens="+strconv.Itoa(int(k.maxTokens)))
	}
	if k.set&setTemp != 0 {
		params = append(params, "temperature="+strconv.FormatFloat(float64(k.temp), 'g', -1, 32))
	}
	if k.set&setTopP != 0 {
		params = append(params, "top_p="+strconv.FormatFloat(float64(k.topP), 'g', -1, 32))
	}
	if k.set&setSeed != 0 {
		params = append(params, "seed="+strconv.FormatInt(k.seed, 10))
	}
	if k.stop != "" {
		params = append(params, "stop="+strconv.Quote(strings.ReplaceAll(k.stop, "\x00", "|")))
	}
	if k.rich != "" {
		h := fnv.New32a()
		h.Write([]byte(k.rich))
		params = append(params, "chat="+strconv.FormatUint(uint64(h.Sum32()), 16))
	}
	if len(params) == 0 {
		return k.route + "@" + backend
	}
	return k.route + "@" + backend + "{" + strings.Join(params, ",") + "}"
}
