package llmsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The packed-prompt format, read here with llmsim's own code rather than
// the client's pack package, so that a bug in the client's format cannot
// hide behind a simulator that shares it. The format, as documented for
// the openai backend's packed chat:
//
//	system: ... a line saying "You will receive several independent requests, ..."
//	user:   Answer each of the following N requests.            (or: ", each in at most T tokens.")
//	        {"id":1,"request":"..."}                               (N lines, ids 1 to N in order)
//
// and the reply is {"answers":[{"id":1,"answer":"..."}, ...]}.

// packedMarker is the line every packed system prompt holds.
const packedMarker = `You will receive several independent requests, one per line`

// maxPackedItems bounds the items llmsim reads from one packed prompt.
const maxPackedItems = 1000

var errNotPacked = errors.New("llmsim: not a packed prompt")

// isPackedSystem reports whether a system message is a packed prompt's.
func isPackedSystem(system string) bool { return strings.Contains(system, packedMarker) }

// parsePacked reads a packed user message: its items and the per-answer
// token budget (0 when none is stated).
func parsePacked(user string) (items []string, budget int, err error) {
	head, body, ok := strings.Cut(user, "\n")
	if !ok {
		return nil, 0, errNotPacked
	}
	rest, ok := strings.CutPrefix(head, "Answer each of the following ")
	if !ok {
		return nil, 0, errNotPacked
	}
	sp := strings.IndexByte(rest, ' ')
	if sp < 0 {
		return nil, 0, errNotPacked
	}
	n, err := strconv.Atoi(rest[:sp])
	if err != nil || n < 1 || n > maxPackedItems {
		return nil, 0, errNotPacked
	}
	switch tail := rest[sp:]; {
	case tail == " requests.":
	case strings.HasPrefix(tail, " requests, each in at most ") && strings.HasSuffix(tail, " tokens."):
		t := strings.TrimSuffix(strings.TrimPrefix(tail, " requests, each in at most "), " tokens.")
		if budget, err = strconv.Atoi(t); err != nil || budget < 1 {
			return nil, 0, errNotPacked
		}
	default:
		return nil, 0, errNotPacked
	}
	lines := strings.Split(body, "\n")
	if len(lines) != n {
		return nil, 0, errNotPacked
	}
	items = make([]string, n)
	for i, l := range lines {
		var it map[string]json.RawMessage
		if json.Unmarshal([]byte(l), &it) != nil || len(it) != 2 {
			return nil, 0, errNotPacked
		}
		var id int
		var req string
		if json.Unmarshal(it["id"], &id) != nil || id != i+1 || json.Unmarshal(it["request"], &req) != nil {
			return nil, 0, errNotPacked
		}
		items[i] = req
	}
	return items, budget, nil
}

// packedAnswer is one entry of a packed reply.
type packedAnswer struct {
	ID     int    `json:"id"`
	Answer string `json:"answer"`
}

func isPacked(system []string) bool {
	for _, s := range system {
		if isPackedSystem(s) {
			return true
		}
	}
	return false
}

// packedReply answers each item as if it came alone, then applies the pack
// faults, and cuts the reply at maxTokens as a model would.
func (s *Server) packedReply(items []string, budget, maxTokens int) (string, bool) {
	if budget == 0 {
		budget = s.cfg.ReplyTokens
	}
	if s.draw() < s.cfg.PackUnparseableRate {
		return cutReply("I'm sorry, but I can only answer one question at a time. Could you send them separately?", maxTokens)
	}
	var sb strings.Builder
	sb.WriteString(`{"answers":[`)
	first := true
	for i, it := range items {
		u := s.draw()
		if u < s.cfg.PackMissingRate {
			continue
		}
		if !first {
			sb.WriteByte(',')
		}
		first = false
		if u < s.cfg.PackMissingRate+s.cfg.PackMalformedRate {
			fmt.Fprintf(&sb, `{"id":%d,"answer":%d}`, i+1, 1000+i)
			continue
		}
		text, _ := Reply(it, budget, s.cfg.ReplyTokens)
		b, _ := json.Marshal(packedAnswer{ID: i + 1, Answer: text}) // ints and strings only
		sb.Write(b)
	}
	sb.WriteString("]}")
	return cutReply(sb.String(), maxTokens)
}
