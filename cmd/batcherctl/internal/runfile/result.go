package runfile

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

var marshal = protojson.MarshalOptions{}

// Result is one line of a results file, as json.Unmarshal reads it.
type Result struct {
	Line       int             `json:"line"`
	ID         string          `json:"id"`
	Completion json.RawMessage `json:"completion,omitempty"`
	Error      *ResultError    `json:"error,omitempty"`
}

// ResultError is a failed request's gRPC status.
type ResultError struct {
	// Code is the canonical name, such as "INVALID_ARGUMENT".
	Code    string `json:"code"`
	Message string `json:"message"`
}

// appendResult appends the result line of request id on input line n: its
// completion (nil when it has none) and its error (nil on success), then a
// newline.
func appendResult(b []byte, n int, id string, comp *batcherv1.Completion, err error) ([]byte, error) {
	b = append(b, `{"line":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, `,"id":`...)
	b = appendString(b, id)
	if comp != nil {
		b = append(b, `,"completion":`...)
		var ok bool
		if b, ok = appendCompletion(b, comp); !ok {
			var merr error
			if b, merr = marshal.MarshalAppend(b, comp); merr != nil {
				return b, fmt.Errorf("line %d: encoding the completion: %w", n, merr)
			}
		}
	}
	if err != nil {
		st := status.Convert(err)
		name, ok := code.Code_name[int32(st.Code())]
		if !ok {
			name = strconv.Itoa(int(st.Code()))
		}
		b = append(b, `,"error":{"code":`...)
		b = appendString(b, name)
		b = append(b, `,"message":`...)
		b = appendString(b, st.Message())
		b = append(b, '}')
	}
	return append(b, "}\n"...), nil
}

func appendString(b []byte, s string) []byte {
	if b, ok := appendJSONString(b, s); ok {
		return b
	}
	q, _ := json.Marshal(s) // not UTF-8: json replaces the bad bytes
	return append(b, q...)
}

// Scanned is what ScanResults found in a results file.
type Scanned struct {
	// Done holds the id of every complete result line that succeeded: a
	// resumed run skips these requests.
	Done map[string]struct{}
	// Lines counts the complete result lines that succeeded.
	Lines int
	// Failed counts the complete result lines that are errors (those with
	// an "error", a completion that failed included): a resumed run sends
	// these requests again, so their lines are to be dropped first
	// (KeepSucceeded).
	Failed int
	// Size is the length of the complete lines; anything after it is a
	// line cut short (a crash while writing) to be truncated.
	Size int64
}

// ScanResults reads a results file for a resumed run. A last line without
// its newline is not counted (Size ends before it); any other line that is
// not a result fails the scan with an error naming it, since appending to a
// file that is not a results file would only make it worse.
func ScanResults(r io.Reader) (Scanned, error) {
	return scanResults(r, nil)
}

// KeepSucceeded reads a results file as ScanResults does and copies its
// complete lines that succeeded to w, dropping the error lines and a last
// line cut short: what a resumed run that retries the failed requests
// appends to.
func KeepSucceeded(w io.Writer, r io.Reader) (Scanned, error) {
	return scanResults(r, w)
}

func scanResults(r io.Reader, keep io.Writer) (Scanned, error) {
	s := Scanned{Done: make(map[string]struct{})}
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, err := readLine(br, DefaultMaxLineBytes)
		if errors.Is(err, io.EOF) {
			return s, nil
		}
		if errors.Is(err, errLineTooLong) {
			return s, fmt.Errorf("results line %d: longer than %d bytes: not a results file", n, DefaultMaxLineBytes)
		}
		if err != nil {
			return s, err
		}
		if len(line) == 0 || line[len(line)-1] != '\n' {
			return s, nil // cut short: Size excludes it
		}
		var res struct {
			ID    *string         `json:"id"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(line, &res); err != nil || res.ID == nil {
			if err == nil {
				err = errors.New(`no "id"`)
			}
			return s, fmt.Errorf("results line %d: not a result: %w", n, err)
		}
		s.Size += int64(len(line))
		if len(res.Error) > 0 && string(res.Error) != "null" {
			s.Failed++
			continue
		}
		s.Done[*res.ID] = struct{}{}
		s.Lines++
		if keep != nil {
			if _, err := keep.Write(line); err != nil {
				return s, err
			}
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine returns the next line with its newline, if it has one. A line
// longer than max is skipped through its newline and reported as
// errLineTooLong. The slice is valid until the next read.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == nil || (errors.Is(err, io.EOF) && len(line) > 0) {
		if len(line) > max {
			return nil, errLineTooLong
		}
		return line, nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		return nil, err
	}
	// Longer than the buffer: gather it, up to max.
	buf := append([]byte(nil), line...)
	for {
		line, err = br.ReadSlice('\n')
		if len(buf)+len(line) > max {
			for errors.Is(err, bufio.ErrBufferFull) { // skip to the newline
				_, err = br.ReadSlice('\n')
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, err
			}
			return nil, errLineTooLong
		}
		buf = append(buf, line...)
		switch {
		case err == nil:
			return buf, nil
		case errors.Is(err, io.EOF):
			return buf, nil
		case !errors.Is(err, bufio.ErrBufferFull):
			return nil, err
		}
	}
}
