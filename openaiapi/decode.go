package openaiapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/batcherhq/batcher/internal/jsonscan"
)

// readBody reads r's body within limit bytes. Past it: 413.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *Error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, &Error{Status: http.StatusRequestEntityTooLarge, Type: TypeInvalidRequest, Code: "request_too_large",
			Message: "request body larger than " + strconv.FormatInt(limit, 10) + " bytes"}
	case err != nil:
		return nil, badRequest("", "reading the request body: %v", err)
	}
	return body, nil
}

// DecodeJSON reads r's body (at most limit bytes, nested at most maxDepth
// levels) into v, a pointer to a struct, as OpenAI's API does: unknown
// fields are ignored; malformed JSON is a 400 naming the line, column and
// byte offset; a value of the wrong type a 400 naming the field; a key an
// object repeats a 400 naming its path (messages[0].content), where
// encoding/json would keep the last value and drop the others. It is
// exported so that handlers mounted beside these (WithBatches) decode
// alike.
func DecodeJSON(w http.ResponseWriter, r *http.Request, v any, limit int64, maxDepth int) *Error {
	body, e := readBody(w, r, limit)
	if e != nil {
		return e
	}
	return decode(body, v, maxDepth)
}

// decode reads body into v; see DecodeJSON.
func decode(body []byte, v any, maxDepth int) *Error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("", "request body is empty: want a JSON object")
	}
	if e := checkDepth(body, maxDepth); e != nil {
		return e
	}
	err := json.Unmarshal(body, v)
	if err == nil {
		return repeatedKey(body, maxDepth)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		at := max(se.Offset-1, 0) // Offset counts the offending byte
		line, col := position(body, at)
		return badRequest("", "malformed JSON at line %d, column %d (byte %d): %s", line, col, at, strings.TrimPrefix(se.Error(), "json: "))
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field == "" {
			return badRequest("", "request body must be a JSON object, got %s", te.Value)
		}
		line, col := position(body, te.Offset)
		return badRequest(te.Field, "%s: want %s, got %s (line %d, column %d)", te.Field, typeName(te.Type), te.Value, line, col)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		line, col := position(body, int64(len(body)))
		return badRequest("", "malformed JSON at line %d, column %d (byte %d): unexpected end of input", line, col, len(body))
	}
	return badRequest("", "malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// repeatedKey refuses body, which the decoder has accepted, when one of its
// objects repeats a key: the decoder kept only the last value, and what
// the caller sent first would be dropped unseen. Free-form objects (a
// schema, metadata) are held to it too: the backend would keep one value of
// its own choosing.
func repeatedKey(body []byte, maxDepth int) *Error {
	path, found := jsonscan.RepeatedKey(body, maxDepth)
	if !found {
		return nil
	}
	return badRequest(truncate(path), "given more than once: each key of a JSON object must be unique (only the last value would be read)")
}

// typeName names a Go type as JSON does.
func typeName(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer in range"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return typeName(t.Elem())
	}
	return t.String()
}

// checkDepth fails when body nests objects and arrays deeper than max,
// naming where. It scans the bytes once; malformed JSON is left for the
// decoder to describe.
func checkDepth(body []byte, maxDepth int) *Error {
	depth := 0
	inString, escaped := false, false
	for i, c := range body {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if depth > maxDepth {
				line, col := position(body, int64(i))
				return badRequest("", "JSON nested deeper than %d levels at line %d, column %d (byte %d)", maxDepth, line, col, i)
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}

// position turns a byte offset into a 1-based line and column.
func position(body []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(body)))
	before := body[:off]
	line = bytes.Count(before, []byte{'\n'}) + 1
	col = int(off) - bytes.LastIndexByte(before, '\n')
	return line, col
}

// decodeKnown reads r's body into v, a pointer to a struct, as DecodeJSON
// does, then refuses by name a top-level field that v's type does not
// read, listing those it does: a parameter Batcher would drop could change
// the answer the caller expects (OpenAI too answers an unrecognized
// argument 400), and so for a field inside one of the objects it reads
// (unknownNested). A field set to null counts as unset. path names the
// endpoint in the message.
func decodeKnown(w http.ResponseWriter, r *http.Request, v any, known map[string]bool, limit int64, maxDepth int, path string) *Error {
	body, e := readBody(w, r, limit)
	if e != nil {
		return e
	}
	return decodeKnownBody(body, v, known, maxDepth, path)
}

// decodeKnownBody is decodeKnown of a body already read: a batch line's
// (CompletionBody, EmbeddingBody) is read as its endpoint's body is.
func decodeKnownBody(body []byte, v any, known map[string]bool, maxDepth int, path string) *Error {
	if e := decode(body, v, maxDepth); e != nil {
		return e
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return badRequest("", "request body must be a JSON object")
	}
	first := ""
	for k, val := range top {
		if !known[k] && string(val) != "null" && (first == "" || k < first) {
			first = k
		}
	}
	if first == "" {
		// The known fields' own objects (nested.go).
		return unknownInObject(top, fieldsOf(reflect.TypeOf(v).Elem()), "", false)
	}
	names := make([]string, 0, len(known))
	for k := range known {
		names = append(names, k)
	}
	slices.Sort(names)
	return badRequest(truncate(first), "is not a parameter Batcher serves on %s, which reads %s", path, strings.Join(names, ", "))
}
