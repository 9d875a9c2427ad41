package openaiapi

import "testing"

// BenchmarkDecodeChat: the front door's decoder on a chat body of a few
// messages and a tool, the hot path's share of every chat call.
func BenchmarkDecodeChat(b *testing.B) {
	body := []byte(`{"model":"chat","messages":[{"role":"system","content":"You are terse."},` +
		`{"role":"user","content":[{"type":"text","text":"What is the weather in Paris?"}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":"18C, clear"}],` +
		`"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather by city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}],` +
		`"temperature":0.2,"max_tokens":64,"metadata":{"team":"a","run":"b"}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var r chatRequest
		if e := decode(body, &r, DefaultMaxJSONDepth); e != nil {
			b.Fatal(e)
		}
	}
}
