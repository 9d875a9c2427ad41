package llmsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func messagesCall(t *testing.T, url string, body any, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	return post(t, url+"/v1/messages", body, append([]string{"anthropic-version", "2023-06-01"}, hdr...)...)
}

func anthropicErrorOf(t *testing.T, body []byte) (typ, msg string) {
	t.Helper()
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Type != "error" {
		t.Fatalf("not an Anthropic error body: %s", body)
	}
	return e.Error.Type, e.Error.Message
}

func TestMessagesAnswer(t *testing.T) {
	_, url := start(t, Config{})
	resp, body := messagesCall(t, url, map[string]any{"model": "sim-chat", "max_tokens": 64, "system": "Be brief.",
		"messages": []any{map[string]any{"role": "user", "content": "Hello there"}}, "stop_sequences": []string{"|"}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var m anthropicResponse
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if m.Type != "message" || len(m.Content) != 1 || m.Content[0].Text != "echo: Hello there " || *m.StopReason != "stop_sequence" ||
		*m.StopSequence != "|" || m.Usage.InputTokens == 0 || m.Usage.OutputTokens != Tokens("echo: Hello there ") {
		t.Errorf("answer %s", body)
	}
}

func TestMessagesRefusals(t *testing.T) {
	_, url := start(t, Config{APIKey: "sk-ant-k"})
	key := []string{"x-api-key", "sk-ant-k"}
	user := map[string]any{"role": "user", "content": "hi"}
	for _, tc := range []struct {
		name   string
		body   map[string]any
		hdr    []string
		status int
		typ    string
		msg    string
	}{
		{"no key", map[string]any{"model": "sim-chat", "max_tokens": 5, "messages": []any{user}}, nil, 401, "authentication_error", "x-api-key"},
		{"no max_tokens", map[string]any{"model": "sim-chat", "messages": []any{user}}, key, 400, "invalid_request_error", "max_tokens: Field required"},
		{"bad role", map[string]any{"model": "sim-chat", "max_tokens": 5, "messages": []any{map[string]any{"role": "system", "content": "x"}}}, key, 400, "invalid_request_error", "messages.0.role"},
		{"temperature", map[string]any{"model": "sim-chat", "max_tokens": 5, "temperature": 1.5, "messages": []any{user}}, key, 400, "invalid_request_error", "temperature"},
		{"unknown model", map[string]any{"model": "claude-nope", "max_tokens": 5, "messages": []any{user}}, key, 404, "not_found_error", "claude-nope"},
		{"orphan tool_result", map[string]any{"model": "sim-chat", "max_tokens": 5, "messages": []any{map[string]any{"role": "user",
			"content": []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_x", "content": "21C"}}}}}, key, 400, "invalid_request_error", "tool_use_id"},
		{"unanswered tool_use", map[string]any{"model": "sim-chat", "max_tokens": 5, "messages": []any{user,
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "toolu_1", "name": "f", "input": map[string]any{}}}},
			map[string]any{"role": "user", "content": "and?"}}}, key, 400, "invalid_request_error", "without `tool_result`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := messagesCall(t, url, tc.body, tc.hdr...)
			typ, msg := anthropicErrorOf(t, body)
			if resp.StatusCode != tc.status || typ != tc.typ || !strings.Contains(msg, tc.msg) {
				t.Errorf("%d %s %q; want %d %s with %q", resp.StatusCode, typ, msg, tc.status, tc.typ, tc.msg)
			}
		})
	}
	// Without anthropic-version: 400.
	resp, body := post(t, url+"/v1/messages", map[string]any{"model": "sim-chat", "max_tokens": 5, "messages": []any{user}}, key...)
	if _, msg := anthropicErrorOf(t, body); resp.StatusCode != http.StatusBadRequest || !strings.Contains(msg, "anthropic-version") {
		t.Errorf("no version: %d %s", resp.StatusCode, body)
	}
}

func TestMessagesRateLimitHeaders(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	_, url := start(t, Config{RPM: 1, Now: func() time.Time { return now }})
	body := map[string]any{"model": "sim-chat", "max_tokens": 5, "messages": []any{map[string]any{"role": "user", "content": "hi"}}}
	resp, _ := messagesCall(t, url, body)
	h := resp.Header
	if resp.StatusCode != http.StatusOK || h.Get("anthropic-ratelimit-requests-limit") != "1" || h.Get("anthropic-ratelimit-requests-remaining") != "0" ||
		h.Get("anthropic-ratelimit-requests-reset") != "2026-01-02T03:05:05Z" || h.Get("x-ratelimit-limit-requests") != "" {
		t.Errorf("headers %v", h)
	}
	resp, raw := messagesCall(t, url, body)
	if typ, _ := anthropicErrorOf(t, raw); resp.StatusCode != http.StatusTooManyRequests || typ != "rate_limit_error" || resp.Header.Get("retry-after") != "60" ||
		resp.Header.Get("retry-after-ms") != "" {
		t.Errorf("second call: %d %v %s", resp.StatusCode, resp.Header, raw)
	}
}

func TestMessagesOverloaded(t *testing.T) {
	_, url := start(t, Config{ErrorRate: 1, Seed: 1})
	seen := map[int]bool{}
	for i := 0; i < 20 && len(seen) < 2; i++ {
		resp, body := messagesCall(t, url, map[string]any{"model": "sim-chat", "max_tokens": 5, "messages": []any{map[string]any{"role": "user", "content": "hi"}}})
		typ, _ := anthropicErrorOf(t, body)
		switch {
		case resp.StatusCode == 529 && typ == "overloaded_error" && resp.Header.Get("retry-after") != "":
		case resp.StatusCode == http.StatusInternalServerError && typ == "api_error":
		default:
			t.Fatalf("fault %d %s", resp.StatusCode, body)
		}
		seen[resp.StatusCode] = true
	}
	if !seen[529] || !seen[500] {
		t.Errorf("faults seen %v, want 500 and 529", seen)
	}
}

func TestMessageBatchRefusals(t *testing.T) {
	_, url := start(t, Config{})
	params := map[string]any{"model": "sim-chat", "max_tokens": 5, "messages": []any{map[string]any{"role": "user", "content": "hi"}}}
	for _, tc := range []struct {
		name string
		reqs []any
		msg  string
	}{
		{"none", []any{}, "at least one request"},
		{"bad id", []any{map[string]any{"custom_id": "a b", "params": params}}, "requests.0.custom_id"},
		{"twice", []any{map[string]any{"custom_id": "a", "params": params}, map[string]any{"custom_id": "a", "params": params}}, "used twice"},
		{"no params", []any{map[string]any{"custom_id": "a"}}, "requests.0.params"},
	} {
		resp, body := post(t, url+"/v1/messages/batches", map[string]any{"requests": tc.reqs}, "anthropic-version", "2023-06-01")
		if _, msg := anthropicErrorOf(t, body); resp.StatusCode != http.StatusBadRequest || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: %d %s", tc.name, resp.StatusCode, body)
		}
	}
}

// A message batch takes BatchTime: it is still processing before, its
// requests spread over it, and ends no sooner.
func TestMessageBatchTakesBatchTime(t *testing.T) {
	const bt = 400 * time.Millisecond
	_, url := start(t, Config{BatchTime: bt})
	params := map[string]any{"model": "sim-chat", "max_tokens": 5, "messages": []any{map[string]any{"role": "user", "content": "hi"}}}
	var reqs []any
	for i := range 4 {
		reqs = append(reqs, map[string]any{"custom_id": fmt.Sprintf("r%d", i), "params": params})
	}
	begun := time.Now()
	resp, body := post(t, url+"/v1/messages/batches", map[string]any{"requests": reqs}, "anthropic-version", "2023-06-01")
	var b struct {
		ID     string `json:"id"`
		Status string `json:"processing_status"`
	}
	if err := json.Unmarshal(body, &b); err != nil || resp.StatusCode != http.StatusOK || b.Status != "in_progress" {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	seenProcessing := false
	for {
		req, _ := http.NewRequest(http.MethodGet, url+"/v1/messages/batches/"+b.ID, nil)
		req.Header.Set("anthropic-version", "2023-06-01")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Status string `json:"processing_status"`
		}
		err = json.NewDecoder(res.Body).Decode(&got)
		_ = res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got.Status == "ended" {
			break
		}
		seenProcessing = true
		if time.Since(begun) > time.Minute {
			t.Fatal("the batch never ended")
		}
		time.Sleep(20 * time.Millisecond) // polling, as a client does
	}
	if el := time.Since(begun); el < bt || !seenProcessing {
		t.Errorf("ended after %v (processing seen %v), want at least BatchTime %v", el, seenProcessing, bt)
	}
}

// HoldBatch holds a message batch before the request it names, with the
// requests before it answered, until its channel closes; the batch then
// runs to its end.
func TestMessageBatchHeld(t *testing.T) {
	reached, release := make(chan string, 1), make(chan struct{})
	hold := func(id string, _ map[string]string, done int) <-chan struct{} {
		if done != 2 {
			return nil
		}
		reached <- id
		return release
	}
	_, url := start(t, Config{HoldBatch: hold})
	params := map[string]any{"model": "sim-chat", "max_tokens": 5, "messages": []any{map[string]any{"role": "user", "content": "hi"}}}
	var reqs []any
	for i := range 4 {
		reqs = append(reqs, map[string]any{"custom_id": fmt.Sprintf("r%d", i), "params": params})
	}
	resp, body := post(t, url+"/v1/messages/batches", map[string]any{"requests": reqs}, "anthropic-version", "2023-06-01")
	var b struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &b); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	type view struct {
		Status string         `json:"processing_status"`
		Counts map[string]int `json:"request_counts"`
	}
	get := func() view {
		req, _ := http.NewRequest(http.MethodGet, url+"/v1/messages/batches/"+b.ID, nil)
		req.Header.Set("anthropic-version", "2023-06-01")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = res.Body.Close() }()
		var v view
		if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	select {
	case id := <-reached:
		if id != b.ID {
			t.Fatalf("held %q, want %q", id, b.ID)
		}
	case <-time.After(time.Minute):
		t.Fatal("HoldBatch was never asked at the batch's third request")
	}
	if v := get(); v.Status != "in_progress" || v.Counts["succeeded"] != 2 || v.Counts["processing"] != 2 {
		t.Fatalf("held halfway: %+v, want in_progress with 2 succeeded and 2 processing", v)
	}
	close(release)
	// Released, it runs its last two requests on its own: a client sees
	// the end only by looking.
	for deadline := time.Now().Add(time.Minute); ; {
		v := get()
		if v.Status == "ended" {
			if v.Counts["succeeded"] != 4 {
				t.Errorf("ended %+v, want 4 succeeded", v)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("released a minute ago, still %+v", v)
		}
		time.Sleep(10 * time.Millisecond) // polling, as a client does
	}
}
