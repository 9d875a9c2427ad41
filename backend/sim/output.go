package sim

import (
	"encoding/binary"
	"hash"
	"hash/fnv"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/batcherhq/batcher/batcher"
)

// vocabulary supplies the generated words after the echo.
var vocabulary = [...]string{
	"batch", "token", "model", "queue", "lane", "window", "latency", "stream",
	"signal", "vector", "prompt", "answer", "merge", "split", "route", "limit",
	"quick", "steady", "simple", "bright", "quiet", "clear", "exact", "plain",
	"the", "a", "of", "and", "to", "in", "is", "it",
	"moves", "holds", "sends", "waits", "finds", "keeps", "turns", "reads",
	"river", "stone", "cloud", "field", "light", "paper", "glass", "metal",
	"north", "south", "early", "later", "above", "below", "inside", "around",
	"one", "two", "three", "four", "five", "six", "seven", "eight",
}

const (
	maxEchoWords     = 8  // the prompt's first words echoed
	maxEchoWordBytes = 16 // each echoed word is cut to this size
	minExtraWords    = 4  // hashed words after the echo: 4 to 4+extraWordsSpan-1
	extraWordsSpan   = 48
)

// completion is one generated text.
type completion struct {
	text   string
	tokens int32
	finish batcher.FinishReason
}

// generate derives in's completion from model, in, p and sample, cut at
// maxTokens words (one word is one token) and at the first stop sequence.
// sample is 0 for a deterministic request, and a fresh number for each call
// that samples (temperature above 0 without a seed), so that repeated runs
// of one prompt differ as a real model's would.
func generate(model string, in *batcher.Input, p *batcher.Params, maxTokens int32, sample uint64) completion {
	h := inputHash(model, in, p)
	if sample != 0 {
		h = splitmix64(h ^ splitmix64(sample))
	}
	words := make([]string, 0, 16)
	for _, w := range strings.Fields(lastText(in)) {
		if len(words) == maxEchoWords {
			break
		}
		words = append(words, cutUTF8(w, maxEchoWordBytes))
	}
	natural := len(words) + minExtraWords + int(h%extraWordsSpan)
	x := h
	for len(words) < natural && len(words) < int(maxTokens) {
		x = splitmix64(x)
		words = append(words, vocabulary[x%uint64(len(vocabulary))])
	}
	c := completion{finish: batcher.FinishStop}
	if natural > int(maxTokens) {
		words = words[:max(0, int(maxTokens))]
		c.finish = batcher.FinishLength
	}
	c.text = strings.Join(words, " ")
	c.tokens = int32(len(words))
	cut := -1
	for _, s := range p.Stop {
		if s == "" {
			continue
		}
		if i := strings.Index(c.text, s); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		// A stop sequence that is not valid UTF-8 may match inside a rune.
		for cut > 0 && !utf8.RuneStart(c.text[cut]) {
			cut--
		}
		c.text = c.text[:cut]
		c.tokens = int32(len(strings.Fields(c.text)))
		c.finish = batcher.FinishStop
	}
	return c
}

// embed derives a unit vector of dims from model and text.
func embed(model, text string, dims int) []float32 {
	h := fnv.New64a()
	writeString(h, model)
	writeString(h, text)
	x := h.Sum64()
	v := make([]float64, dims)
	var norm float64
	for i := range v {
		x = splitmix64(x)
		// 53 random bits to [-1, 1).
		f := float64(x>>11)/(1<<52) - 1
		v[i] = f
		norm += f * f
	}
	out := make([]float32, dims)
	if norm == 0 {
		out[0] = 1
		return out
	}
	norm = math.Sqrt(norm)
	for i, f := range v {
		out[i] = float32(f / norm)
	}
	return out
}

// promptTokens estimates an input's tokens as the core does: about four
// bytes a token.
func promptTokens(in *batcher.Input) int32 { return int32(in.Size()/4 + 1) }

// inputHash hashes everything that shapes a generated text except
// max_tokens and stop, which only cut it.
func inputHash(model string, in *batcher.Input, p *batcher.Params) uint64 {
	h := fnv.New64a()
	writeString(h, model)
	h.Write([]byte{byte(in.Op)})
	switch in.Op {
	case batcher.OpChat:
		for i := range in.Messages {
			m := &in.Messages[i]
			writeString(h, m.Role)
			writeString(h, m.Content)
			if len(m.Parts) > 0 || len(m.ToolCalls) > 0 || m.ToolCallID != "" || m.Name != "" {
				writeString(h, m.Name)
				writeString(h, m.ToolCallID)
				for _, p := range m.Parts {
					writeString(h, p.Text)
					writeString(h, p.ImageURL)
				}
				for _, c := range m.ToolCalls {
					writeString(h, c.Name)
					writeString(h, c.Arguments)
				}
			}
		}
	case batcher.OpCompletion:
		writeString(h, in.Prompt)
	case batcher.OpEmbedding:
		writeString(h, in.Text)
	}
	var b [9]byte
	if p.Temperature != nil {
		b[0] = 1
		binary.LittleEndian.PutUint32(b[1:], math.Float32bits(*p.Temperature))
		h.Write(b[:5])
	}
	if p.TopP != nil {
		b[0] = 2
		binary.LittleEndian.PutUint32(b[1:], math.Float32bits(*p.TopP))
		h.Write(b[:5])
	}
	if p.Seed != nil {
		b[0] = 3
		binary.LittleEndian.PutUint64(b[1:], uint64(*p.Seed))
		h.Write(b[:9])
	}
	return h.Sum64()
}

// writeString writes s and its length, so that field boundaries count.
func writeString(h hash.Hash64, s string) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

// lastText is the text a completion echoes: the prompt, or the last
// non-empty chat message.
func lastText(in *batcher.Input) string {
	switch in.Op {
	case batcher.OpChat:
		for i := len(in.Messages) - 1; i >= 0; i-- {
			if t := in.Messages[i].Text(); t != "" {
				return t
			}
		}
	case batcher.OpCompletion:
		return in.Prompt
	}
	return ""
}

// cutUTF8 cuts s to at most n bytes without splitting a rune, and replaces
// invalid bytes so that the output is always valid UTF-8.
func cutUTF8(s string, n int) string {
	if len(s) > n {
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// splitmix64 is a fast, well-mixed step for deriving a stream of values from
// one hash.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
