package batcher

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// oldParams is Params as it was before the rich parameters moved behind
// Params.Rich, field for field: what jobs stored (encoding/json, no tags)
// and what a binary from before the move reads.
type oldParams struct {
	MaxTokens   int32
	Temperature *float32
	TopP        *float32
	Stop        []string
	Seed        *int64

	PresencePenalty  *float32
	FrequencyPenalty *float32
	N                int32
	LogitBias        map[string]float32
	Logprobs         bool
	TopLogprobs      *int32
	ReasoningEffort  string
}

// TestParamsJSONIsTheOldFlatForm: Params encode as the old flat struct
// did, byte for byte, so that jobs stored before and after the move read
// alike, in a binary from before it too.
func TestParamsJSONIsTheOldFlatForm(t *testing.T) {
	for name, tc := range map[string]struct {
		old oldParams
		new Params
	}{
		"zero": {},
		"plain": {
			oldParams{MaxTokens: 64, Temperature: ptr[float32](0.5), TopP: ptr[float32](0.9), Stop: []string{"\n"}, Seed: ptr[int64](7)},
			Params{MaxTokens: 64, Temperature: ptr[float32](0.5), TopP: ptr[float32](0.9), Stop: []string{"\n"}, Seed: ptr[int64](7)},
		},
		"every parameter": {
			oldParams{MaxTokens: 64, Temperature: ptr[float32](0.5), TopP: ptr[float32](0.9), Stop: []string{"\n", "END"}, Seed: ptr[int64](-7),
				PresencePenalty: ptr[float32](0.5), FrequencyPenalty: ptr[float32](-1), N: 3, LogitBias: map[string]float32{"7": 5, "50256": -100},
				Logprobs: true, TopLogprobs: ptr[int32](2), ReasoningEffort: "low"},
			Params{MaxTokens: 64, Temperature: ptr[float32](0.5), TopP: ptr[float32](0.9), Stop: []string{"\n", "END"}, Seed: ptr[int64](-7),
				Rich: &RichParams{PresencePenalty: ptr[float32](0.5), FrequencyPenalty: ptr[float32](-1), N: 3,
					LogitBias: map[string]float32{"7": 5, "50256": -100}, Logprobs: true, TopLogprobs: ptr[int32](2), ReasoningEffort: "low"}},
		},
		"one rich parameter": {oldParams{N: 1}, Params{Rich: &RichParams{N: 1}}},
	} {
		old, err := json.Marshal(tc.old)
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(tc.new)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, old) {
			t.Errorf("%s: Params encode as\n%s\nthe old form is\n%s", name, got, old)
		}
		var back Params
		if err := json.Unmarshal(old, &back); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(back, tc.new) {
			t.Errorf("%s: the old form decodes to %+v (rich %+v), want %+v (rich %+v)", name, back, back.Rich, tc.new, tc.new.Rich)
		}
	}
}

// TestParamsJSONDecodesTheOldLiteral decodes the flat form as jobs stored
// it before the move (a literal, as it sits in a row) and gets every
// parameter back; a round trip keeps them.
func TestParamsJSONDecodesTheOldLiteral(t *testing.T) {
	const stored = `{"MaxTokens":64,"Temperature":0.5,"TopP":0.9,"Stop":["\n","END"],"Seed":-7,` +
		`"PresencePenalty":0.5,"FrequencyPenalty":-1,"N":3,"LogitBias":{"50256":-100,"7":5},"Logprobs":true,"TopLogprobs":2,"ReasoningEffort":"low"}`
	want := Params{MaxTokens: 64, Temperature: ptr[float32](0.5), TopP: ptr[float32](0.9), Stop: []string{"\n", "END"}, Seed: ptr[int64](-7),
		Rich: &RichParams{PresencePenalty: ptr[float32](0.5), FrequencyPenalty: ptr[float32](-1), N: 3,
			LogitBias: map[string]float32{"7": 5, "50256": -100}, Logprobs: true, TopLogprobs: ptr[int32](2), ReasoningEffort: "low"}}
	var p Params
	if err := json.Unmarshal([]byte(stored), &p); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("decoded %+v (rich %+v), want %+v (rich %+v)", p, p.Rich, want, want.Rich)
	}
	b, err := json.Marshal(&p)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != stored {
		t.Errorf("re-encoded as\n%s\nwant\n%s", b, stored)
	}

	// Zero rich parameters, or none, decode to a nil Rich: a plain request
	// stays plain.
	for _, s := range []string{`{"MaxTokens":5}`, `{"MaxTokens":5,"N":0,"LogitBias":{},"Logprobs":false,"TopLogprobs":null,"ReasoningEffort":""}`} {
		var q Params
		if err := json.Unmarshal([]byte(s), &q); err != nil {
			t.Fatal(err)
		}
		if q.Rich != nil || q.MaxTokens != 5 {
			t.Errorf("%s: decoded %+v, rich %+v", s, q, q.Rich)
		}
	}
	// As without the method, fields the JSON leaves out keep their values.
	q := Params{Seed: ptr[int64](1), Rich: &RichParams{ReasoningEffort: "high"}}
	if err := json.Unmarshal([]byte(`{"MaxTokens":5}`), &q); err != nil {
		t.Fatal(err)
	}
	if q.MaxTokens != 5 || q.Seed == nil || *q.Seed != 1 || q.Rich == nil || q.Rich.ReasoningEffort != "high" {
		t.Errorf("merged into %+v, rich %+v", q, q.Rich)
	}
	if err := json.Unmarshal([]byte(`{"N":"two"}`), &q); err == nil {
		t.Error("a string for N decoded")
	}
}
