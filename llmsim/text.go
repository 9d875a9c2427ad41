package llmsim

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"
	"unicode/utf8"
)

// Tokens counts s's tokens the simulator's way: four bytes a token, rounded
// up; at least one for any non-empty text.
func Tokens(s string) int {
	return (len(s) + 3) / 4
}

// words are the filler of every reply.
var words = strings.Fields(`the a of to and in is it that for on with as was at by this be are from or
an but not have one all can had were they there which their more will would about so no when up out
if what some time them into then only very could its new just also any after first over well like
model batch token answer request reply upstream queue window route lane simulated`)

// echoBytes is how much of the prompt a reply repeats.
const echoBytes = 40

// Reply returns the simulator's answer to prompt in at most maxTokens
// tokens (4×maxTokens bytes), and whether maxTokens cut it short of the full
// replyTokens-token answer. The answer repeats the prompt's start, so that
// tests and people can see which prompt it answers; the rest is filler
// chosen by the prompt's hash. A shorter budget yields a prefix of a longer
// one's answer.
func Reply(prompt string, maxTokens, replyTokens int) (text string, cut bool) {
	full := fullReply(prompt, replyTokens)
	if maxTokens < 1 {
		maxTokens = 1
	}
	if limit := 4 * maxTokens; len(full) > limit {
		return cutRunes(full, limit), true
	}
	return full, false
}

func fullReply(prompt string, replyTokens int) string {
	limit := 4 * max(replyTokens, 1)
	var sb strings.Builder
	sb.WriteString("echo: ")
	sb.WriteString(strings.Join(strings.Fields(cutRunes(prompt, echoBytes)), " "))
	sb.WriteString(" |")
	rng := rand.New(rand.NewPCG(hash(prompt), 0x5eed))
	for {
		w := words[rng.IntN(len(words))]
		if sb.Len()+1+len(w) > limit {
			break
		}
		sb.WriteByte(' ')
		sb.WriteString(w)
	}
	return cutRunes(sb.String(), limit)
}

// Embedding returns text's embedding: a unit vector of dim values drawn
// from the text's hash.
func Embedding(text string, dim int) []float32 {
	rng := rand.New(rand.NewPCG(hash(text), 0xe5b))
	v := make([]float32, dim)
	var norm float64
	for i := range v {
		x := rng.Float64()*2 - 1
		v[i] = float32(x)
		norm += x * x
	}
	if norm = math.Sqrt(norm); norm > 0 {
		for i := range v {
			v[i] = float32(float64(v[i]) / norm)
		}
	}
	return v
}

func hash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// cutRunes returns s cut to at most n bytes at a rune boundary.
func cutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
