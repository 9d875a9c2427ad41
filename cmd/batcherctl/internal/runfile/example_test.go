package runfile_test

import (
	"fmt"
	"strings"

	"github.com/batcherhq/batcher/cmd/batcherctl/internal/runfile"
)

func ExampleParseLine() {
	req, err := runfile.ParseLine(3, []byte(`{"model":"sim-chat","chat":{"messages":[{"role":"user","content":"Hi"}]},"priority":"PRIORITY_HIGH"}`))
	fmt.Println(req.GetId(), req.GetModel(), req.GetPriority(), err)

	_, err = runfile.ParseLine(4, []byte(`{"model":"sim-chat","prompt":"Hi"}`))
	fmt.Println(err != nil, strings.HasPrefix(err.Error(), "line 4: "))
	// Output:
	// line-3 sim-chat PRIORITY_HIGH <nil>
	// true true
}

func ExampleScanResults() {
	file := `{"line":1,"id":"q1","completion":{"text":"Hello"}}
{"line":2,"id":"q2","error":{"code":"INVALID_ARGUMENT","message":"request.model: unknown model"}}
{"line":3,"id":"q3","compl`
	s, err := runfile.ScanResults(strings.NewReader(file))
	_, q1 := s.Done["q1"]
	_, q2 := s.Done["q2"] // failed: a resumed run sends it again
	fmt.Println(s.Lines, s.Failed, q1, q2, s.Size < int64(len(file)), err)
	// Output: 1 1 true false true <nil>
}
