package openai

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

// marshalChat is what appendPlainChat must write for r: json.Marshal's
// encoding, of streamChatRequest when stream is set.
func marshalChat(t *testing.T, r chatRequest, stream bool) []byte {
	t.Helper()
	var body any = r
	if stream {
		body = streamChatRequest{chatRequest: r, Stream: true, StreamOptions: &streamOptions{IncludeUsage: true}}
	}
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func f32(v float32) *float32 { return &v }

// TestAppendPlainChat: appendPlainChat writes json.Marshal's bytes for
// every plain chat, and gives up, leaving dst as it was, on every other.
func TestAppendPlainChat(t *testing.T) {
	seed := int64(-42)
	plain := []chatRequest{
		{Model: "gpt-4o", Messages: []wireMessage{{Role: "user", Content: "hi"}}},
		{Model: "m", Messages: []wireMessage{{Role: "system", Content: "be brief"}, {Role: "user", Content: "a \"quoted\" <b>&</b> line\n\t\b\f\r\x00\x1f\x7f é \u2028 \u2029 😀 caf\xe9 \xff"}},
			MaxTokens: 16, Temperature: f32(0.7), TopP: f32(1), Stop: []string{"\n\n", "END"}, Seed: &seed},
		{Model: "m", Messages: []wireMessage{}, MaxCompletionTokens: -3, Temperature: f32(0), TopP: f32(1e-6)},
		{Model: "", Messages: nil, Temperature: f32(123456789), TopP: f32(0.1)},
		{Model: "m", Messages: []wireMessage{{Role: "user", Content: ""}}, Stop: []string{}},
	}
	for i, r := range plain {
		for _, stream := range []bool{false, true} {
			want := marshalChat(t, r, stream)
			got, ok := appendPlainChat([]byte("prefix"), &r, stream)
			if !ok {
				t.Fatalf("request %d (stream %v): not plain", i, stream)
			}
			if !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Errorf("request %d (stream %v):\n got %s\nwant prefix%s", i, stream, got, want)
			}
		}
	}
	yes := true
	other := []chatRequest{
		{Model: "m", Messages: []wireMessage{{Role: "user", Content: []wirePart{{Type: "text", Text: "x"}}}}},
		{Model: "m", Messages: []wireMessage{{Role: "assistant", Content: nil, ToolCalls: []wireToolCall{{ID: "c"}}}}},
		{Model: "m", Messages: []wireMessage{{Role: "tool", Content: "r", ToolCallID: "c"}}},
		{Model: "m", Messages: []wireMessage{{Role: "user", Content: "x", Name: "n"}}},
		{Model: "m", ResponseFormat: json.RawMessage(`{"type":"json_object"}`)},
		{Model: "m", Tools: []wireTool{{Type: "function"}}},
		{Model: "m", ToolChoice: "auto"},
		{Model: "m", ParallelToolCalls: &yes},
		{Model: "m", PresencePenalty: f32(1)},
		{Model: "m", FrequencyPenalty: f32(1)},
		{Model: "m", N: 2},
		{Model: "m", LogitBias: map[string]float32{"1": 1}},
		{Model: "m", Logprobs: true},
		{Model: "m", TopLogprobs: new(int32)},
		{Model: "m", User: "u"},
		{Model: "m", ReasoningEffort: "low"},
		{Model: "m", extra: []byte(`{"x":1}`)},
		{Model: "m", Temperature: f32(float32(math.Inf(1)))},
		{Model: "m", Temperature: f32(float32(math.NaN()))},
		{Model: "m", TopP: f32(1e-7)},
		{Model: "m", Temperature: f32(1e21)},
	}
	for i, r := range other {
		got, ok := appendPlainChat([]byte("prefix"), &r, true)
		if ok || string(got) != "prefix" {
			t.Errorf("request %d: ok %v, wrote %q; want a refusal that writes nothing", i, ok, got)
		}
	}
}

// FuzzAppendPlainChat holds appendPlainChat to json.Marshal: where it
// writes a body, json.Marshal writes the same bytes.
func FuzzAppendPlainChat(f *testing.F) {
	f.Add("gpt-4o", "user", "hello", "\n", float32(0.7), float32(1), int32(16), int64(7), true)
	f.Add("m<&>", "system", "a \"q\" \\ \u2028 caf\xe9 \x01 😀", "", float32(1e-6), float32(-2.5e20), int32(-1), int64(-9), false)
	f.Fuzz(func(t *testing.T, model, role, content, stop string, temp, topP float32, maxTokens int32, seed int64, stream bool) {
		r := chatRequest{Model: model, Messages: []wireMessage{{Role: role, Content: content}, {Role: "user", Content: stop + content}},
			MaxTokens: maxTokens, Temperature: &temp, TopP: &topP, Seed: &seed}
		if stop != "" {
			r.Stop = []string{stop, content}
		}
		got, ok := appendPlainChat(nil, &r, stream)
		if !ok {
			return
		}
		if want := marshalChat(t, r, stream); !bytes.Equal(got, want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}

// BenchmarkEncodeChat is a streamed chat's body (bench's BenchmarkStreamStart
// chat) encoded by appendPlainChat (enc=append) and by json.Marshal
// (enc=marshal), what Stream did before.
func BenchmarkEncodeChat(b *testing.B) {
	r := chatRequest{Model: "sim-chat", Messages: []wireMessage{{Role: "user", Content: "start chat 12345"}}, MaxTokens: 16}
	b.Run("enc=append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := appendPlainChat(nil, &r, true); !ok {
				b.Fatal("not plain")
			}
		}
	})
	b.Run("enc=marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var body any = streamChatRequest{chatRequest: r, Stream: true, StreamOptions: &streamOptions{IncludeUsage: true}}
			if _, err := encodeBody(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestAppendPlainChatEveryField guards the hand-written encoder against a
// field added to chatRequest or wireMessage later: each exported field in
// turn is set to a value other than its zero, on a plain chat, and
// appendPlainChat must then either write json.Marshal's bytes or give up.
// A new field that plainChat neither encodes nor refuses would be dropped
// from the body silently; this test fails on it.
func TestAppendPlainChatEveryField(t *testing.T) {
	base := func() chatRequest {
		return chatRequest{Model: "m", Messages: []wireMessage{{Role: "user", Content: "hi"}}}
	}
	check := func(name string, r chatRequest) {
		t.Helper()
		for _, stream := range []bool{false, true} {
			got, ok := appendPlainChat(nil, &r, stream)
			if !ok {
				continue
			}
			if want := marshalChat(t, r, stream); !bytes.Equal(got, want) {
				t.Errorf("%s set (stream %v): appendPlainChat wrote\n %s\nwant\n %s", name, stream, got, want)
			}
		}
	}
	rt := reflect.TypeFor[chatRequest]()
	for i := range rt.NumField() {
		f := rt.Field(i)
		if !f.IsExported() {
			continue // extra: refused by TestAppendPlainChat's cases
		}
		r := base()
		reflect.ValueOf(&r).Elem().Field(i).Set(nonZero(t, f.Type))
		check("chatRequest."+f.Name, r)
	}
	mt := reflect.TypeFor[wireMessage]()
	for i := range mt.NumField() {
		f := mt.Field(i)
		r := base()
		reflect.ValueOf(&r.Messages[0]).Elem().Field(i).Set(nonZero(t, f.Type))
		check("wireMessage."+f.Name, r)
	}
}

// nonZero is a value of type t other than its zero: a one-element slice or
// map, a pointer to a non-zero value, "x", 1 or true.
func nonZero(t *testing.T, typ reflect.Type) reflect.Value {
	t.Helper()
	v := reflect.New(typ).Elem()
	switch typ.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(0.5)
	case reflect.Pointer:
		v.Set(reflect.New(typ.Elem()))
		v.Elem().Set(nonZero(t, typ.Elem()))
	case reflect.Slice:
		if typ.Elem().Kind() == reflect.Uint8 { // json.RawMessage and []byte
			v.SetBytes([]byte(`{"x":1}`))
			break
		}
		v.Set(reflect.MakeSlice(typ, 1, 1))
		v.Index(0).Set(nonZero(t, typ.Elem()))
	case reflect.Map:
		v.Set(reflect.MakeMap(typ))
		v.SetMapIndex(nonZero(t, typ.Key()), nonZero(t, typ.Elem()))
	case reflect.Interface:
		v.Set(reflect.ValueOf("x"))
	case reflect.Struct:
		for i := range typ.NumField() {
			if typ.Field(i).IsExported() {
				v.Field(i).Set(nonZero(t, typ.Field(i).Type))
			}
		}
	default:
		t.Fatalf("nonZero: no value for %s", typ)
	}
	return v
}
