package server

import (
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/batcherhq/batcher/batcher"
	batcherv1 "github.com/batcherhq/batcher/gen/batcher/v1"
	"google.golang.org/grpc/codes"
)

// TestStreamCompletionsReused checks that a stream's items, which the
// sender puts back once their Completions are sent (stream.reuse), carry only
// their own request's fields, in the request the core reads and in the
// Completion: failed and succeeded requests alternate on one stream, one
// at a time, so that each is built in an item that carried another kind
// of request and answer before.
func TestStreamCompletionsReused(t *testing.T) {
	be := newFake()
	be.fail = func(r *batcher.Request) error {
		if r.Metadata["fail"] == "yes" {
			return &batcher.UpstreamError{Class: batcher.ClassInvalidRequest, StatusCode: 400, Message: "too long"}
		}
		return nil
	}
	e := newEnv(t, be)
	s := e.openStream(t, testCtx(t))
	for i := range 40 {
		id := "r" + strconv.Itoa(i)
		fail := i%2 == 0
		r := chatReq(id, id)
		if fail {
			r.Metadata = map[string]string{"fail": "yes"}
		}
		s.send(reqMsg(r))
		c := s.until(func(m *batcherv1.SubmitStreamResponse) bool { return m.GetCompletion() != nil }).GetCompletion()
		if c.GetId() != id {
			t.Fatalf("completion for %q, want %q", c.GetId(), id)
		}
		if fail {
			if c.GetOutput() != nil || c.GetUsage() != nil || c.GetFinishReason() != 0 ||
				c.GetError().GetCode() != int32(codes.InvalidArgument) || c.GetMetadata()["fail"] != "yes" {
				t.Fatalf("failed request %s: %v", id, c)
			}
			continue
		}
		if c.GetError() != nil || c.GetText() != "echo: "+id || c.GetUsage().GetCompletionTokens() != 3 ||
			c.GetFinishReason() != batcherv1.FinishReason_FINISH_REASON_STOP || len(c.GetMetadata()) != 0 {
			t.Fatalf("request %s: %v", id, c)
		}
	}
	_ = s.CloseSend()
	if _, err := s.drain(); err != nil {
		t.Fatal(err)
	}
}

// TestSpareItemsBounded checks the server's store of spare stream items:
// it keeps at most its max, hands back what it kept, then new items.
func TestSpareItemsBounded(t *testing.T) {
	p := &spareItems{max: 3}
	var list *item
	kept := map[*item]bool{}
	for range 5 {
		it := new(item)
		it.next = list
		list = it
	}
	p.put(list)
	if p.n != 3 {
		t.Fatalf("store holds %d items, want its max 3", p.n)
	}
	for it := p.head; it != nil; it = it.next {
		kept[it] = true
	}
	for i := range 4 {
		it := p.get()
		if it.next != nil {
			t.Fatalf("get %d: item still linked", i)
		}
		if got, want := kept[it], i < 3; got != want {
			t.Fatalf("get %d: from the store %v, want %v", i, got, want)
		}
	}
}

// TestItemsMapClearedForTheNextStream checks that a stream's items map
// goes back to itemMaps only once both the sender and the receiver are
// done with it, and empty: a stream closed with requests in flight must
// not hand their ids to the next stream, which would refuse them as
// duplicates.
func TestItemsMapClearedForTheNextStream(t *testing.T) {
	st := &stream{items: map[string]*item{"a": new(item)}, peak: 1}
	m := st.items
	st.leave()
	if len(m) != 1 || st.items == nil {
		t.Fatal("the first to leave emptied the map the other still reads")
	}
	st.leave()
	if len(m) != 0 || st.items != nil {
		t.Fatalf("after both left: %d items, map kept %v; want it cleared and let go", len(m), st.items != nil)
	}
}

// TestStreamCallSlotsConcurrentSafe races what may touch a stream
// request's Call while its item, Call included, is reused for the next
// request (item.refs): cancels by id, Flush messages and half-closes on
// several streams at once, against the core ending their batches. Run
// with -race. A Call cancelled or flushed after it went to another
// request would end that request CANCELLED or send it early: every
// request must end once, CANCELLED only when it was cancelled, and
// otherwise with its own answer.
func TestStreamCallSlotsConcurrentSafe(t *testing.T) {
	e := newEnv(t, newFake())
	const streams, perStream = 4, 150
	var wg sync.WaitGroup
	for k := range streams {
		wg.Go(func() {
			s := e.openStream(t, testCtx(t))
			cancelled := map[string]bool{}
			sendErr := make(chan error, 1)
			go func() {
				defer close(sendErr)
				for i := range perStream {
					id := fmt.Sprintf("s%d-r%d", k, i)
					msgs := []*batcherv1.SubmitStreamRequest{reqMsg(chatReq(id, id))}
					switch i % 5 {
					case 1:
						msgs = append(msgs, cancelMsg(fmt.Sprintf("s%d-r%d", k, i-1)))
					case 3:
						msgs = append(msgs, flushMsg)
					}
					for _, m := range msgs {
						if err := s.Send(m); err != nil {
							sendErr <- err
							return
						}
					}
				}
				sendErr <- s.CloseSend()
			}()
			for i := 1; i < perStream; i += 5 {
				cancelled[fmt.Sprintf("s%d-r%d", k, i-1)] = true
			}
			msgs, err := s.drain()
			if err != nil {
				t.Errorf("stream %d ended with %v", k, err)
				return
			}
			if err := <-sendErr; err != nil {
				t.Errorf("stream %d: Send: %v", k, err)
				return
			}
			ta := tallyOf(msgs)
			if len(ta.completions) != perStream || len(ta.dupDone) != 0 {
				t.Errorf("stream %d: %d completions (%v duplicated), want %d", k, len(ta.completions), ta.dupDone, perStream)
			}
			for id, c := range ta.completions {
				switch code := codes.Code(c.GetError().GetCode()); {
				case code == codes.Canceled && !cancelled[id]:
					t.Errorf("%s: CANCELLED, but nobody cancelled it", id)
				case c.GetError() == nil && c.GetText() != "echo: "+id:
					t.Errorf("%s: answer %q, want its own", id, c.GetText())
				case c.GetError() != nil && code != codes.Canceled:
					t.Errorf("%s: %v", id, c.GetError())
				}
			}
		})
	}
	wg.Wait()
}
