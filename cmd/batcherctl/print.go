package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// codeName is a gRPC code's canonical name, such as "INVALID_ARGUMENT".
func codeName(c codes.Code) string {
	if n, ok := code.Code_name[int32(c)]; ok {
		return n
	}
	return strconv.Itoa(int(c))
}

// rpcError describes a failed call for people: "what: CODE: message".
func rpcError(what string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: DEADLINE_EXCEEDED: --timeout passed", what)
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %s: %s", what, codeName(st.Code()), st.Message())
}

// serviceStatus is the status the service answered with, found anywhere
// in err's chain (unlike status.FromError, whose message for a wrapped
// status is the whole chain's text).
func serviceStatus(err error) (*status.Status, bool) {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return nil, false
	}
	st := se.GRPCStatus()
	return st, st != nil && st.Code() != codes.OK
}

// printJSON writes m as indented protobuf JSON and a newline.
func printJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// resultJSON is r as a line of batcherctl jobs results: its protobuf JSON,
// with the item and run always present. Protobuf JSON leaves out zero
// values, which left the first input's lines (item 0) and every first run
// (run 0) without the index a reader keys results on.
func resultJSON(r *batcherv1.JobResult) ([]byte, error) {
	b, err := protojson.Marshal(r)
	if err != nil || (r.GetItem() != 0 && r.GetRun() != 0) {
		return b, err
	}
	rest := bytes.TrimSpace(b)[1:] // after the '{'
	line := []byte{'{'}
	if r.GetItem() == 0 {
		line = append(line, `"item":"0",`...)
	}
	if r.GetRun() == 0 {
		line = append(line, `"run":0,`...)
	}
	if t := bytes.TrimSpace(rest); len(t) > 0 && t[0] == '}' { // r is empty
		line = line[:len(line)-1]
	}
	return append(line, rest...), nil
}
