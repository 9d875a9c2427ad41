package server

import (
	"strconv"
	"strings"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/structpb"
)

// A request may carry fields its message type does not declare: a client
// built from a newer batcher.proto, or a hand-made message. Decoding keeps
// them aside, and the server would serve the request without them, a
// request other than the one sent (a tool the model never sees, say). The
// codec refuses such a message instead, naming where the field sits and
// its number (unknownField).

// msgFields are, for every message type a batcher.v1 message can hold, its
// fields that hold messages (singular, repeated or map values): the only
// places below a message where an unknown field can hide. Built once;
// read-only after.
var msgFields = func() map[protoreflect.MessageDescriptor][]protoreflect.FieldDescriptor {
	plans := make(map[protoreflect.MessageDescriptor][]protoreflect.FieldDescriptor)
	var add func(md protoreflect.MessageDescriptor)
	add = func(md protoreflect.MessageDescriptor) {
		if _, ok := plans[md]; ok {
			return
		}
		plans[md] = nil // before the fields: a message may hold its own type
		var fds []protoreflect.FieldDescriptor
		fields := md.Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			sub := fd.Message()
			if fd.IsMap() {
				sub = fd.MapValue().Message()
			}
			if sub == nil {
				continue
			}
			fds = append(fds, fd)
			add(sub)
		}
		plans[md] = fds
	}
	var addAll func(ms protoreflect.MessageDescriptors)
	addAll = func(ms protoreflect.MessageDescriptors) {
		for i := range ms.Len() {
			add(ms.Get(i))
			addAll(ms.Get(i).Messages())
		}
	}
	protoregistry.GlobalFiles.RangeFilesByPackage(batcherPackage, func(f protoreflect.FileDescriptor) bool {
		addAll(f.Messages())
		return true
	})
	return plans
}()

// unknownField describes the first field of m, or of a message inside it,
// that its type does not declare: "request.tools[0].function has field
// 99, which batcher.v1.Tool does not declare". It returns "" when there is
// none, which is the common case and costs a look at each set message
// field.
func unknownField(m protoreflect.Message) string {
	path, num, md, ok := firstUnknown(m)
	if !ok {
		return ""
	}
	var sb strings.Builder
	for i := len(path) - 1; i >= 0; i-- { // firstUnknown lists the path leaf first
		sb.WriteString(path[i])
		if i > 0 {
			sb.WriteByte('.')
		}
	}
	where := sb.String()
	if where == "" {
		where = "the message"
	}
	return where + " has field " + strconv.Itoa(int(num)) + ", which " + string(md.FullName()) +
		" does not declare: the server would drop it (is the client built from a newer batcher.proto?)"
}

// firstUnknown finds the first message at or below m with unknown fields:
// the path to it from m, leaf first, the number of its first unknown
// field and its type.
func firstUnknown(m protoreflect.Message) (path []string, num protowire.Number, md protoreflect.MessageDescriptor, ok bool) {
	if u := m.GetUnknown(); len(u) > 0 {
		num, _, _ = protowire.ConsumeTag(u)
		return nil, num, m.Descriptor(), true
	}
	for _, fd := range msgFields[m.Descriptor()] {
		if !m.Has(fd) {
			continue
		}
		name := string(fd.Name())
		switch v := m.Get(fd); {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if path, num, md, ok = firstUnknown(l.Get(i).Message()); ok {
					return append(path, name+"["+strconv.Itoa(i)+"]"), num, md, true
				}
			}
		case fd.IsMap():
			if path, num, md, ok = firstUnknownIn(v.Map()); ok {
				path[len(path)-1] = name + path[len(path)-1]
				return path, num, md, true
			}
		default:
			if path, num, md, ok = firstUnknown(v.Message()); ok {
				return append(path, name), num, md, true
			}
		}
	}
	return nil, 0, nil, false
}

// firstUnknownIn is firstUnknown for a map's message values; the path's
// last element is the entry's key, ["k"], for the caller to prefix with
// the field's name. (Apart from firstUnknown so that its closure does not
// move firstUnknown's results to the heap on every call.)
func firstUnknownIn(m protoreflect.Map) (path []string, num protowire.Number, md protoreflect.MessageDescriptor, ok bool) {
	m.Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
		path, num, md, ok = firstUnknown(e.Message())
		if ok {
			path = append(path, "["+strconv.Quote(k.String())+"]")
		}
		return !ok
	})
	return path, num, md, ok
}

// hasUnknown reports whether m, or a message inside it, holds a field its
// type does not declare. The messages every Submit and stream message
// carries are walked through their generated types, without reflection
// (about a tenth of firstUnknown's cost); every other message, and the
// free-form Structs inside a request, by firstUnknown.
func hasUnknown(m proto.Message) bool {
	switch m := m.(type) {
	case *batcherv1.SubmitRequest:
		return unknownIn(m) || requestHasUnknown(m.GetRequest())
	case *batcherv1.SubmitStreamedRequest:
		return unknownIn(m) || requestHasUnknown(m.GetRequest())
	case *batcherv1.SubmitStreamRequest:
		if unknownIn(m) {
			return true
		}
		switch k := m.GetKind().(type) {
		case *batcherv1.SubmitStreamRequest_Request:
			return requestHasUnknown(k.Request)
		case *batcherv1.SubmitStreamRequest_Cancel:
			return unknownIn(k.Cancel)
		}
	}
	_, _, _, ok := firstUnknown(m.ProtoReflect())
	return ok
}

// requestHasUnknown is hasUnknown for a Request. TestRequestHasUnknownCovers
// holds it to every message type a Request can hold.
func requestHasUnknown(r *batcherv1.Request) bool {
	if r == nil {
		return false
	}
	if unknownIn(r) || unknownIn(r.GetParams()) || unknownIn(r.GetTimeout()) ||
		unknownIn(r.GetToolChoice()) || unknownIn(r.GetCompletion()) || unknownIn(r.GetEmbedding()) ||
		structHasUnknown(r.GetExtraBody()) {
		return true
	}
	if rf := r.GetResponseFormat(); unknownIn(rf) || structHasUnknown(rf.GetSchema()) {
		return true
	}
	for _, t := range r.GetTools() {
		if unknownIn(t) || structHasUnknown(t.GetParameters()) {
			return true
		}
	}
	chat := r.GetChat()
	if unknownIn(chat) {
		return true
	}
	for _, msg := range chat.GetMessages() {
		if unknownIn(msg) {
			return true
		}
		for _, p := range msg.GetParts() {
			if unknownIn(p) || unknownIn(p.GetImage()) {
				return true
			}
		}
		for _, tc := range msg.GetToolCalls() {
			if unknownIn(tc) {
				return true
			}
		}
	}
	return false
}

// unknownIn reports whether m itself (not what it holds) has unknown
// fields; a nil m has none.
func unknownIn[M interface {
	*T
	proto.Message
}, T any](m M) bool {
	return m != nil && len(m.ProtoReflect().GetUnknown()) > 0
}

// structHasUnknown is hasUnknown for a free-form Struct, set only by
// requests with tools, a schema or extra body fields.
func structHasUnknown(s *structpb.Struct) bool {
	if s == nil {
		return false
	}
	_, _, _, ok := firstUnknown(s.ProtoReflect())
	return ok
}
