package runfile

import (
	"bufio"
	"errors"
	"strings"
	"testing"
)

func TestParseLine(t *testing.T) {
	for _, tc := range []struct {
		name    string
		line    string
		wantID  string
		wantErr string // substring; "" for success
		blank   bool
	}{
		{name: "with id", line: `{"id":"q1","model":"m","chat":{"messages":[{"role":"user","content":"hi"}]}}`, wantID: "q1"},
		{name: "proto names", line: `{"model":"m","completion":{"prompt":"p"},"params":{"max_tokens":5},"priority":"PRIORITY_HIGH"}`, wantID: "line-7"},
		{name: "empty id", line: `{"id":"","model":"m","embedding":{"text":"t"}}`, wantID: "line-7"},
		{name: "crlf", line: "{\"model\":\"m\"}\r\n", wantID: "line-7"},
		{name: "blank", line: " \t\r\n", blank: true},
		{name: "not json", line: `hello`, wantErr: "line 7: not a batcher.v1.Request"},
		{name: "cut short", line: `{"model":"m","chat":`, wantErr: "line 7:"},
		{name: "unknown field", line: `{"modelName":"m"}`, wantErr: `unknown field "modelName"`},
		{name: "bad enum", line: `{"priority":"PRIORITY_SOON"}`, wantErr: "PRIORITY_SOON"},
		{name: "two inputs", line: `{"chat":{},"embedding":{}}`, wantErr: "line 7:"},
		{name: "array", line: `[1,2]`, wantErr: "line 7:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := ParseLine(7, []byte(tc.line))
			switch {
			case tc.blank:
				if req != nil || err != nil {
					t.Fatalf("blank line: %v, %v; want nil, nil", req, err)
				}
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				if req.GetId() != tc.wantID {
					t.Errorf("id %q, want %q", req.GetId(), tc.wantID)
				}
			}
		})
	}
}

func TestReadLine(t *testing.T) {
	long := strings.Repeat("x", 100)
	in := "a\n" + long + "\nb\n" + strings.Repeat("y", 30) + "\nlast"
	// A 16-byte buffer (bufio's minimum) makes the 30-byte line cross it.
	br := bufio.NewReaderSize(strings.NewReader(in), 16)
	var got []string
	for {
		line, err := readLine(br, 50)
		if errors.Is(err, errLineTooLong) {
			got = append(got, "TOO LONG")
			continue
		}
		if err != nil {
			break
		}
		got = append(got, string(line))
	}
	want := []string{"a\n", "TOO LONG", "b\n", strings.Repeat("y", 30) + "\n", "last"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("lines %q, want %q", got, want)
	}
}
