package openaiapi

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// A body's objects below its top level (stream_options, a tool and its
// function, an object tool_choice, response_format and its json_schema, a
// message's content parts, their image_url, its tool calls and their
// functions) are decoded into structs that hold only the fields Batcher
// reads; json.Unmarshal would drop the rest unseen. unknownNested refuses
// such a field by its path instead, as a top-level or message field is
// refused: a dropped field would answer another request than the one sent.
// Free-form objects (a tool's parameters, a schema, metadata, logit_bias)
// are the caller's own and are not looked into.

// toolChoiceObject is the object form of tool_choice, as
// wireToolChoice.UnmarshalJSON reads it.
type toolChoiceObject struct {
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
	} `json:"function"`
}

var (
	rawMessageType   = reflect.TypeFor[json.RawMessage]()
	contentType      = reflect.TypeFor[content]()
	contentPartsType = reflect.TypeFor[[]contentPart]()
	toolChoiceType   = reflect.TypeFor[wireToolChoice]()
	toolChoiceObj    = reflect.TypeFor[toolChoiceObject]()
)

// structFields are a struct type's JSON field names, mapped to their
// types, and the names sorted for messages.
type structFields struct {
	types map[string]reflect.Type
	names string
}

// foldsTo reports the field whose JSON name k differs from only in case.
func (sf *structFields) foldsTo(k string) (string, bool) {
	for name := range sf.types {
		if strings.EqualFold(name, k) {
			return name, true
		}
	}
	return "", false
}

var fieldCache sync.Map // reflect.Type → *structFields

func fieldsOf(t reflect.Type) *structFields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*structFields)
	}
	sf := &structFields{types: map[string]reflect.Type{}}
	var add func(t reflect.Type)
	add = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Anonymous {
				add(f.Type)
				continue
			}
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
				sf.types[name] = f.Type
			}
		}
	}
	add(t)
	names := make([]string, 0, len(sf.types))
	for n := range sf.types {
		names = append(names, n)
	}
	slices.Sort(names)
	sf.names = strings.Join(names, ", ")
	f, _ := fieldCache.LoadOrStore(t, sf)
	return f.(*structFields)
}

// nestedType is the type unknownNested checks raw, decoded as t, against:
// a struct whose fields are checked, an array of such, or nil (not looked
// into: a scalar, a free-form object, a string content or tool_choice).
func nestedType(t reflect.Type, raw json.RawMessage) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case rawMessageType:
		return nil
	case contentType: // a string, or an array of parts
		if firstByte(raw) == '[' {
			return contentPartsType
		}
		return nil
	case toolChoiceType: // a mode, or an object
		if firstByte(raw) == '{' {
			return toolChoiceObj
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		if firstByte(raw) == '{' && !reflect.PointerTo(t).Implements(unmarshalerType) {
			return t
		}
	case reflect.Slice:
		if firstByte(raw) == '[' && nestedElem(t.Elem()) {
			return t
		}
	}
	return nil
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// nestedElem reports whether an array of t may hold objects to check.
func nestedElem(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && t != rawMessageType
}

// unknownNested refuses, naming its path, the first field (in sorted
// order) of raw, decoded as t at path, that t does not read; null counts as
// unset. Malformed JSON is left for the decoder to describe.
func unknownNested(raw json.RawMessage, t reflect.Type, path string) *Error {
	t = nestedType(t, raw)
	if t == nil {
		return nil
	}
	if t.Kind() == reflect.Slice {
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return nil
		}
		for i, it := range items {
			if e := unknownNested(it, t.Elem(), path+"["+strconv.Itoa(i)+"]"); e != nil {
				return e
			}
		}
		return nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return nil
	}
	return unknownInObject(obj, fieldsOf(t), path, true)
}

// unknownInObject is unknownNested on an object already split into its
// fields, whose own fields are checked when own is set.
func unknownInObject(obj map[string]json.RawMessage, sf *structFields, path string, own bool) *Error {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		ft, ok := sf.types[k]
		if !ok {
			if name, folds := sf.foldsTo(k); folds {
				// encoding/json matches a field's name case-insensitively: the
				// value went into name's field, or was dropped for name's own.
				return badRequest(joinPath(path, truncate(k)), "is not a field: names are case-sensitive; did you mean %q?", name)
			}
			if own && string(obj[k]) != "null" {
				return badRequest(joinPath(path, truncate(k)), "is not a field Batcher serves in %s, which reads %s", path, sf.names)
			}
			continue
		}
		if e := unknownNested(obj[k], ft, joinPath(path, k)); e != nil {
			return e
		}
	}
	return nil
}

func joinPath(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}
