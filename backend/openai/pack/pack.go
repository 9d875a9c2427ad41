package pack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxItems bounds the items of one pack, in Build, ParseRequest and Parse.
const MaxItems = 1000

// Errors of Parse and ParseRequest. An Answer's Err is one of ErrMissing,
// ErrMalformed and ErrDuplicate.
var (
	// ErrUnparseable: the reply holds no list of answers at all.
	ErrUnparseable = errors.New("pack: reply holds no JSON list of answers")
	// ErrMissing: the reply has no answer for the item.
	ErrMissing = errors.New("pack: no answer for the item")
	// ErrMalformed: the item's answer is not a non-blank string.
	ErrMalformed = errors.New("pack: malformed answer for the item")
	// ErrDuplicate: the reply answers the item more than once.
	ErrDuplicate = errors.New("pack: item answered more than once")
	// ErrNotPacked: a chat message is not a packed prompt.
	ErrNotPacked = errors.New("pack: not a packed prompt")
)

// instructions is the packed system prompt. It names the reply's shape even
// when the upstream cannot enforce the schema.
const instructions = `You will receive several independent requests, one per line, each a JSON object with an "id" and a "request".
Answer every request on its own, as if it were the only one, and never mention the other requests.
Reply with only a JSON object of the form {"answers":[{"id":1,"answer":"..."}]}: one entry per request, with the request's id and your complete answer as a string.`

// Marker is a line that every packed system prompt contains, so that a
// simulator can tell packed prompts from others.
const Marker = `You will receive several independent requests, one per line, each a JSON object with an "id" and a "request".`

const (
	headerPrefix = "Answer each of the following "
	headerItems  = " requests"
	headerTokens = ", each in at most "
	headerEnd    = " tokens."
)

// Prompt is a packed chat prompt: a system and a user message.
type Prompt struct {
	System string
	User   string
}

// Build packs items into one prompt. system, when not empty, is the system
// prompt every item shares; it comes first. maxTokens, when positive, is
// each answer's token budget, stated in the prompt. Items are numbered from
// 1 in order. Build fails for no items, more than MaxItems, or an item that
// is not valid UTF-8 (it would not survive the JSON encoding).
func Build(system string, items []string, maxTokens int) (Prompt, error) {
	if len(items) == 0 {
		return Prompt{}, errors.New("pack: items: must hold at least one item")
	}
	if len(items) > MaxItems {
		return Prompt{}, fmt.Errorf("pack: items: must hold at most %d items, got %d", MaxItems, len(items))
	}
	var p Prompt
	if system != "" {
		p.System = system + "\n\n" + instructions
	} else {
		p.System = instructions
	}
	var sb bytes.Buffer
	sb.WriteString(headerPrefix)
	sb.WriteString(strconv.Itoa(len(items)))
	sb.WriteString(headerItems)
	if maxTokens > 0 {
		sb.WriteString(headerTokens)
		sb.WriteString(strconv.Itoa(maxTokens))
		sb.WriteString(headerEnd)
	} else {
		sb.WriteByte('.')
	}
	sb.WriteByte('\n')
	enc := json.NewEncoder(&sb)
	enc.SetEscapeHTML(false)
	for i, it := range items {
		if !utf8.ValidString(it) {
			return Prompt{}, fmt.Errorf("pack: items[%d]: not valid UTF-8", i)
		}
		// The encoder ends each line with a newline and escapes the
		// item's own newlines, so every item is exactly one line.
		if err := enc.Encode(line{ID: i + 1, Request: it}); err != nil {
			return Prompt{}, fmt.Errorf("pack: items[%d]: %w", i, err)
		}
	}
	p.User = strings.TrimSuffix(sb.String(), "\n")
	return p, nil
}

type line struct {
	ID      int    `json:"id"`
	Request string `json:"request"`
}

// IsPacked reports whether a system message is a packed prompt's.
func IsPacked(system string) bool { return strings.Contains(system, Marker) }

// SharedSystem returns the system prompt the items share, as given to
// Build, from a packed system message.
func SharedSystem(system string) string {
	s, ok := strings.CutSuffix(system, instructions)
	if !ok {
		return ""
	}
	return strings.TrimSuffix(s, "\n\n")
}

// ParseRequest reads a packed user message back into its items and the
// per-answer token budget (0 when none was stated). It fails with
// ErrNotPacked when user is not in Build's format.
func ParseRequest(user string) (items []string, maxTokens int, err error) {
	head, body, _ := strings.Cut(user, "\n")
	rest, ok := strings.CutPrefix(head, headerPrefix)
	if !ok {
		return nil, 0, ErrNotPacked
	}
	num, rest, ok := strings.Cut(rest, headerItems)
	if !ok {
		return nil, 0, ErrNotPacked
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 || n > MaxItems || num != strconv.Itoa(n) {
		return nil, 0, fmt.Errorf("%w: bad item count %q", ErrNotPacked, trunc(num))
	}
	switch {
	case rest == ".":
	case len(rest) > len(headerTokens)+len(headerEnd) && strings.HasPrefix(rest, headerTokens) && strings.HasSuffix(rest, headerEnd):
		t := rest[len(headerTokens) : len(rest)-len(headerEnd)]
		maxTokens, err = strconv.Atoi(t)
		if err != nil || maxTokens < 1 || t != strconv.Itoa(maxTokens) {
			return nil, 0, fmt.Errorf("%w: bad token budget %q", ErrNotPacked, trunc(t))
		}
	default:
		return nil, 0, ErrNotPacked
	}
	lines := strings.Split(body, "\n")
	if len(lines) != n {
		return nil, 0, fmt.Errorf("%w: header says %d items, got %d lines", ErrNotPacked, n, len(lines))
	}
	items = make([]string, n)
	for i, l := range lines {
		var it struct {
			ID      *int    `json:"id"`
			Request *string `json:"request"`
		}
		if err := json.Unmarshal([]byte(l), &it); err != nil || it.ID == nil || it.Request == nil {
			return nil, 0, fmt.Errorf("%w: line %d is not an item", ErrNotPacked, i+1)
		}
		if *it.ID != i+1 {
			return nil, 0, fmt.Errorf("%w: line %d has id %d", ErrNotPacked, i+1, *it.ID)
		}
		items[i] = *it.Request
	}
	return items, maxTokens, nil
}

// schema is the reply's JSON schema in OpenAI's response_format
// "json_schema" shape. Strict mode needs an object at the root, so the list
// sits under "answers".
const schema = `{"name":"packed_answers","strict":true,"schema":{"type":"object","properties":{"answers":{"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},"answer":{"type":"string"}},"required":["id","answer"],"additionalProperties":false}}},"required":["answers"],"additionalProperties":false}}`

// Schema returns the value of response_format.json_schema that makes an
// upstream with structured output produce a reply Parse reads.
func Schema() json.RawMessage { return json.RawMessage(schema) }

// Entry is one answer of a reply.
type Entry struct {
	ID     int    `json:"id"`
	Answer string `json:"answer"`
}

// Encode writes entries as a reply in the schema's shape.
func Encode(entries []Entry) string {
	var sb bytes.Buffer
	enc := json.NewEncoder(&sb)
	enc.SetEscapeHTML(false)
	if entries == nil {
		entries = []Entry{}
	}
	// Entries hold only ints and strings: encoding cannot fail.
	_ = enc.Encode(struct {
		Answers []Entry `json:"answers"`
	}{entries})
	return strings.TrimSuffix(sb.String(), "\n")
}

// Answer is the reply's answer to one item: Text, or Err saying why there is
// none.
type Answer struct {
	Text string
	Err  error
}

// maxStarts bounds how many candidate openings of a JSON list Parse tries
// past leading prose.
const maxStarts = 16

// Parse reads a reply to a pack of n items into n answers, answers[i] for
// the item with id i+1. It accepts the schema's object, a bare array of
// entries, either one inside a Markdown code fence or after some prose, and
// a reply cut short, whose complete entries it keeps. It returns
// ErrUnparseable when the reply holds no list of entries at all.
func Parse(reply string, n int) ([]Answer, error) {
	if n < 0 || n > MaxItems {
		return nil, fmt.Errorf("pack: n: must be 0 to %d, got %d", MaxItems, n)
	}
	raws, ok := findList(reply)
	if !ok {
		return nil, ErrUnparseable
	}
	answers := make([]Answer, n)
	seen := make([]bool, n)
	for _, raw := range raws {
		id, text, err := decodeEntry(raw)
		if id < 1 || id > n {
			continue // cannot be routed
		}
		i := id - 1
		switch {
		case seen[i]:
			answers[i] = Answer{Err: ErrDuplicate}
		case err != nil:
			answers[i] = Answer{Err: err}
		default:
			answers[i] = Answer{Text: text}
		}
		seen[i] = true
	}
	for i := range answers {
		if !seen[i] {
			answers[i].Err = ErrMissing
		}
	}
	return answers, nil
}

// findList finds the list of entries in reply: the first JSON array, or the
// first array value of the first JSON object, whose decoding starts cleanly.
// It keeps the elements decoded before any syntax error. ok is false when no
// list was found, or when a list was cut before its first element.
func findList(reply string) (raws []json.RawMessage, ok bool) {
	s := reply
	for range maxStarts {
		i := strings.IndexAny(s, "[{")
		if i < 0 {
			return nil, false
		}
		s = s[i:]
		raws, found, closed := readList(s)
		if found && (len(raws) > 0 || closed) {
			return raws, true
		}
		s = s[1:]
	}
	return nil, false
}

// readList decodes a list at the start of s. found says a list opened;
// closed says it also closed without error.
func readList(s string) (raws []json.RawMessage, found, closed bool) {
	dec := json.NewDecoder(strings.NewReader(s))
	tok, err := dec.Token()
	if err != nil {
		return nil, false, false
	}
	switch tok {
	case json.Delim('['):
		raws, closed = readArray(dec)
		return raws, true, closed
	case json.Delim('{'):
	default:
		return nil, false, false
	}
	for dec.More() {
		if _, err := dec.Token(); err != nil { // the key
			return nil, false, false
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, false, false
		}
		switch tok {
		case json.Delim('['):
			raws, closed = readArray(dec)
			return raws, true, closed
		case json.Delim('{'):
			if !skip(dec) {
				return nil, false, false
			}
		}
	}
	return nil, false, false
}

// readArray decodes an opened array's elements up to its end or the first
// error.
func readArray(dec *json.Decoder) (raws []json.RawMessage, closed bool) {
	for dec.More() {
		var r json.RawMessage
		if err := dec.Decode(&r); err != nil {
			return raws, false
		}
		raws = append(raws, r)
	}
	tok, err := dec.Token()
	return raws, err == nil && tok == json.Delim(']')
}

// skip consumes the rest of an opened object or array.
func skip(dec *json.Decoder) bool {
	for depth := 1; depth > 0; {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return true
}

// decodeEntry reads one entry. id is 0 when the entry names no usable id;
// err is ErrMalformed when it names one but its answer is unusable.
func decodeEntry(raw json.RawMessage) (id int, text string, err error) {
	var e struct {
		ID     json.RawMessage `json:"id"`
		Answer json.RawMessage `json:"answer"`
	}
	if json.Unmarshal(raw, &e) != nil {
		return 0, "", ErrMalformed
	}
	id = decodeID(e.ID)
	if id == 0 {
		return 0, "", ErrMalformed
	}
	if json.Unmarshal(e.Answer, &text) != nil || strings.TrimSpace(text) == "" {
		return id, "", ErrMalformed
	}
	return id, text, nil
}

// decodeID accepts an id as a JSON integer or a string of digits.
func decodeID(raw json.RawMessage) int {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		s = string(raw)
	}
	id, err := strconv.Atoi(s)
	if err != nil || id < 1 || id > MaxItems {
		return 0
	}
	return id
}

func trunc(s string) string {
	if len(s) > 16 {
		return s[:16] + "..."
	}
	return s
}
