package runfile

import (
	"bytes"
	"fmt"
	"strconv"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// DefaultMaxLineBytes bounds one input line. The service's own bound on an
// input (max_input_bytes, 256 KiB by default) is far below it; the bound here
// keeps a file without newlines from filling memory.
const DefaultMaxLineBytes = 16 << 20

var unmarshal = protojson.UnmarshalOptions{}

// ParseLine parses line n (counted from 1) of a request file. It returns
// nil and no error for a blank line. A request without an id gets
// LineID(n). An error names the line and, where protojson says, the field.
func ParseLine(n int, line []byte) (*batcherv1.Request, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil, nil
	}
	req, ok := fastParse(line)
	if !ok {
		req = new(batcherv1.Request)
		if err := unmarshal.Unmarshal(line, req); err != nil {
			return nil, fmt.Errorf("line %d: not a batcher.v1.Request in protobuf JSON: %w", n, err)
		}
	}
	if req.GetId() == "" {
		req.Id = LineID(n)
	}
	return req, nil
}

// LineID is the id of a request on line n that has none.
func LineID(n int) string { return "line-" + strconv.Itoa(n) }
