package runfile

import (
	"encoding/json"
	"strings"
	"testing"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

func TestAppendResult(t *testing.T) {
	comp := &batcherv1.Completion{Id: "q\"1", Output: &batcherv1.Completion_Text{Text: "hi\nthere"},
		Usage: &batcherv1.Usage{TotalTokens: 7}}
	failed := &batcherv1.Completion{Id: "q2", Error: status.New(codes.Unavailable, "upstream down").Proto()}
	for _, tc := range []struct {
		name     string
		comp     *batcherv1.Completion
		err      error
		wantCode string
	}{
		{"success", comp, nil, ""},
		{"rejected", nil, status.Error(codes.InvalidArgument, `request.model: unknown model "x"`), "INVALID_ARGUMENT"},
		{"failed completion", failed, status.ErrorProto(failed.GetError()), "UNAVAILABLE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := appendResult([]byte("keep"), 12, tc.comp.GetId()+"x", tc.comp, tc.err)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(b), "keep") || !strings.HasSuffix(string(b), "}\n") || strings.Count(string(b), "\n") != 1 {
				t.Fatalf("not one line appended: %q", b)
			}
			var r Result
			if err := json.Unmarshal(b[len("keep"):], &r); err != nil {
				t.Fatalf("not JSON: %v: %s", err, b)
			}
			if r.Line != 12 || r.ID != tc.comp.GetId()+"x" {
				t.Errorf("line %d id %q, want 12 %q", r.Line, r.ID, tc.comp.GetId()+"x")
			}
			if tc.comp != nil {
				got := new(batcherv1.Completion)
				if err := protojson.Unmarshal(r.Completion, got); err != nil || !proto.Equal(got, tc.comp) {
					t.Errorf("completion %v (%v), want %v", got, err, tc.comp)
				}
			} else if r.Completion != nil {
				t.Errorf("completion %s, want none", r.Completion)
			}
			switch {
			case tc.wantCode == "" && r.Error != nil:
				t.Errorf("error %+v, want none", r.Error)
			case tc.wantCode != "" && (r.Error == nil || r.Error.Code != tc.wantCode || r.Error.Message != status.Convert(tc.err).Message()):
				t.Errorf("error %+v, want %s: %s", r.Error, tc.wantCode, status.Convert(tc.err).Message())
			}
		})
	}
}

func TestScanResults(t *testing.T) {
	full := `{"line":1,"id":"a","completion":{}}` + "\n" + `{"line":3,"id":"b","error":{"code":"INTERNAL","message":"x"}}` + "\n"
	for _, tc := range []struct {
		name     string
		in       string
		wantIDs  string
		wantSize int
		wantErr  string
	}{
		{name: "empty", in: "", wantIDs: ""},
		{name: "complete", in: full, wantIDs: "a", wantSize: len(full)},
		{name: "cut short", in: full + `{"line":4,"id":"c","compl`, wantIDs: "a", wantSize: len(full)},
		{name: "cut after the object", in: full + `{"line":4,"id":"c"}`, wantIDs: "a", wantSize: len(full)},
		{name: "error null", in: full + `{"line":4,"id":"c","error":null}` + "\n", wantIDs: "a,c", wantSize: len(full) + 33},
		{name: "not results", in: "hello\n", wantErr: "results line 1: not a result"},
		{name: "no id", in: full + `{"line":4}` + "\n", wantErr: `results line 3: not a result: no "id"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ScanResults(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, id := range []string{"a", "b", "c"} {
				if _, ok := s.Done[id]; ok {
					ids = append(ids, id)
				}
			}
			wantFailed := 0
			if tc.in != "" {
				wantFailed = 1 // b
			}
			if strings.Join(ids, ",") != tc.wantIDs || s.Size != int64(tc.wantSize) || s.Lines != len(ids) || s.Failed != wantFailed {
				t.Errorf("ids %v size %d lines %d failed %d, want %s %d %d", ids, s.Size, s.Lines, s.Failed, tc.wantIDs, tc.wantSize, wantFailed)
			}
			// KeepSucceeded copies what ScanResults counts as done.
			var kept strings.Builder
			if _, err := KeepSucceeded(&kept, strings.NewReader(tc.in)); err != nil {
				t.Fatal(err)
			}
			if got := strings.Count(kept.String(), "\n"); got != s.Lines || strings.Contains(kept.String(), `"error":{`) {
				t.Errorf("kept %q: want the %d lines that succeeded", kept.String(), s.Lines)
			}
		})
	}
}
