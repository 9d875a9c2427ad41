package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

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
	return &serviceError{msg: fmt.Sprintf("%s: %s: %s", what, codeName(st.Code()), st.Message()), code: st.Code()}
}

// serviceError is a call the service refused, described for people, with
// the status code kept for execute (which adds a hint to UNAUTHENTICATED).
type serviceError struct {
	msg  string
	code codes.Code
}

func (e *serviceError) Error() string { return e.msg }

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

// jsonOutput is how every -o json output marshals: with the zero values of
// scalar fields (a count of 0, item 0, run 0, false), which protobuf JSON
// leaves out by default. A machine reading "failed" must find 0, not a
// missing key it has to know to read as 0. Unset messages stay out.
var jsonOutput = protojson.MarshalOptions{EmitDefaultValues: true}

// printJSON writes m as indented protobuf JSON and a newline.
func printJSON(w io.Writer, m proto.Message) error {
	opts := jsonOutput
	opts.Multiline, opts.Indent = true, "  "
	b, err := opts.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// printJSONLine writes m as one line of protobuf JSON (jobs list, watch,
// results), for tools that read a line at a time.
func printJSONLine(w io.Writer, m proto.Message) error {
	b, err := jsonOutput.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// plural is n and noun, with an s unless n is 1: "1 result written", not
// "1 results written".
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.FormatInt(n, 10) + " " + noun + "s"
}
