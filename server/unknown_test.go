package server

import (
	"errors"
	"io"
	"strings"
	"testing"

	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
)

// withUnknown gives m a field 999 its type does not declare, as a client
// built from a newer batcher.proto would send, and returns m.
func withUnknown[M proto.Message](m M) M {
	b := protowire.AppendTag(nil, 999, protowire.VarintType)
	m.ProtoReflect().SetUnknown(protowire.AppendVarint(b, 1))
	return m
}

// TestUnknownFieldIsRefused sends requests carrying a field their type does
// not declare, at the top and deep inside, on every RPC that takes a
// Request: each is INVALID_ARGUMENT naming where the field sits, its number
// and its type, never served without it. A request without one is served.
func TestUnknownFieldIsRefused(t *testing.T) {
	e := newEnv(t, newFake())
	ctx := testCtx(t)
	cases := []struct {
		name, where, typ string
		req              func() *batcherv1.Request
	}{
		{"request", "request has field 999", "batcher.v1.Request", func() *batcherv1.Request {
			return withUnknown(chatReq("", "hi"))
		}},
		{"chat message", "request.chat.messages[1] has field 999", "batcher.v1.ChatMessage", func() *batcherv1.Request {
			r := chatReq("", "hi")
			chat := r.GetChat()
			chat.Messages = append(chat.Messages, withUnknown(&batcherv1.ChatMessage{Role: "user", Content: "again"}))
			return r
		}},
		{"tool", "request.tools[0] has field 999", "batcher.v1.Tool", func() *batcherv1.Request {
			r := chatReq("", "hi")
			r.Tools = []*batcherv1.Tool{withUnknown(&batcherv1.Tool{Name: "f"})}
			return r
		}},
		{"params", "request.params has field 999", "batcher.v1.GenerationParams", func() *batcherv1.Request {
			r := chatReq("", "hi")
			r.Params = withUnknown(&batcherv1.GenerationParams{})
			return r
		}},
		{"struct value", `request.extra_body.fields["k"] has field 999`, "google.protobuf.Value", func() *batcherv1.Request {
			r := chatReq("", "hi")
			r.ExtraBody = &structpb.Struct{Fields: map[string]*structpb.Value{"k": withUnknown(structpb.NewBoolValue(true))}}
			return r
		}},
	}
	check := func(t *testing.T, err error, where, typ string) {
		t.Helper()
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), where+", which "+typ+" does not declare") {
			t.Errorf("got %v, want INVALID_ARGUMENT saying %q, which %s does not declare", st, where, typ)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Run("Submit", func(t *testing.T) {
				_, err := e.client.Submit(ctx, &batcherv1.SubmitRequest{Request: c.req()})
				check(t, err, c.where, c.typ)
			})
			// On a stream the request is refused alone, by its id: the
			// requests beside it are served and the stream ends OK.
			t.Run("SubmitStream", func(t *testing.T) {
				s, err := e.client.SubmitStream(ctx)
				if err != nil {
					t.Fatal(err)
				}
				bad := c.req()
				bad.Id = "bad"
				for _, m := range []*batcherv1.SubmitStreamRequest{reqMsg(chatReq("before", "a")), reqMsg(bad), reqMsg(chatReq("after", "b"))} {
					if err := s.Send(m); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.CloseSend(); err != nil {
					t.Fatal(err)
				}
				var msgs []*batcherv1.SubmitStreamResponse
				for {
					m, err := s.Recv()
					if err != nil {
						if !errors.Is(err, io.EOF) {
							t.Fatalf("the stream ended with %v, want OK", err)
						}
						break
					}
					msgs = append(msgs, m)
				}
				ta := tallyOf(msgs)
				if rs := ta.rejections["bad"]; len(rs) != 1 {
					t.Fatalf("rejections of bad: %v, want one", rs)
				} else {
					check(t, status.ErrorProto(rs[0].GetError()), c.where, c.typ)
				}
				if len(ta.completions) != 2 || ta.completions["before"].GetText() != "echo: a" || ta.completions["after"].GetText() != "echo: b" {
					t.Errorf("completions %v, want before's and after's served", ta.completions)
				}
			})
			t.Run("SubmitStreamed", func(t *testing.T) {
				r := c.req()
				r.Stream = true
				s, err := e.client.SubmitStreamed(ctx, &batcherv1.SubmitStreamedRequest{Request: r})
				if err != nil {
					t.Fatal(err)
				}
				for {
					if _, err = s.Recv(); err != nil {
						break
					}
				}
				check(t, err, c.where, c.typ)
			})
		})
	}
	// The stream's own options message, outside any Request.
	s, err := e.client.SubmitStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(optionsMsg(withUnknown(&batcherv1.StreamOptions{}))); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err = s.Recv(); err != nil {
			break
		}
	}
	check(t, err, "options has field 999", "batcher.v1.StreamOptions")
	// Without one, served.
	resp, err := e.client.Submit(ctx, &batcherv1.SubmitRequest{Request: chatReq("", "ok")})
	if err != nil || resp.GetCompletion().GetText() != "echo: ok" {
		t.Fatalf("Submit = %v, %v", resp, err)
	}
}

// TestRequestHasUnknownCovers puts an unknown field into each message a
// Request can hold, one place at a time, built from the Request's
// descriptor: requestHasUnknown, which walks the generated types by hand,
// must find every one, and unknownField must name its place. A message
// added to batcher.proto and not to requestHasUnknown fails here.
func TestRequestHasUnknownCovers(t *testing.T) {
	places := 0
	var visit func(path []protoreflect.FieldDescriptor, md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool)
	visit = func(path []protoreflect.FieldDescriptor, md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) {
		places++
		r := &batcherv1.Request{}
		leaf := r.ProtoReflect()
		for _, fd := range path {
			switch {
			case fd.IsList():
				l := leaf.Mutable(fd).List()
				e := l.NewElement()
				l.Append(e)
				leaf = e.Message()
			case fd.IsMap():
				mp := leaf.Mutable(fd).Map()
				v := mp.NewValue()
				mp.Set(protoreflect.ValueOfString("k").MapKey(), v)
				leaf = v.Message()
			default:
				leaf = leaf.Mutable(fd).Message()
			}
		}
		leaf.SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 1))
		if !requestHasUnknown(r) {
			t.Errorf("requestHasUnknown misses an unknown field in %s (%d fields down)", md.FullName(), len(path))
		}
		if why := unknownField(r.ProtoReflect()); !strings.Contains(why, "which "+string(md.FullName())+" does not declare") {
			t.Errorf("unknownField = %q, want it to name %s", why, md.FullName())
		}
		if seen[md.FullName()] { // Struct holds Value holds Struct: once round is enough
			return
		}
		seen[md.FullName()] = true
		defer delete(seen, md.FullName())
		for _, fd := range msgFields[md] {
			sub := fd.Message()
			if fd.IsMap() {
				sub = fd.MapValue().Message()
			}
			visit(append(path[:len(path):len(path)], fd), sub, seen)
		}
	}
	visit(nil, (&batcherv1.Request{}).ProtoReflect().Descriptor(), map[protoreflect.FullName]bool{})
	if places < 12 {
		t.Fatalf("visited %d places, want every message a Request holds", places)
	}
}

// BenchmarkUnknownField is the check's cost on a chat request with
// parameters, which has none: it runs on every request decoded.
func BenchmarkUnknownField(b *testing.B) {
	r := chatReq("", "hi")
	r.Params = &batcherv1.GenerationParams{}
	m := &batcherv1.SubmitRequest{Request: r}
	b.ReportAllocs()
	for b.Loop() {
		if hasUnknown(m) {
			b.Fatal("unknown field found")
		}
	}
}
