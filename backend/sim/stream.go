package sim

import (
	"context"
	"strings"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// Stream implements batcher.Streamer: one request's answer, the same text
// Dispatch would give it, written one word (token) a delta: the first after
// TimeToFirstToken (default BaseLatency), the rest at TokensPerSecond
// (default one per PerToken). Admission, limits and injected failures are
// as for a call of one input.
func (p *Provider) Stream(ctx context.Context, b *batcher.Batch, w batcher.DeltaWriter) (batcher.Response, error) {
	var out [1]batcher.Response
	if err := p.call(ctx, b.Model, b.Op, b.MaxTokens, b.Requests[:1], out[:], w); err != nil {
		return batcher.Response{}, err
	}
	if out[0].Err != nil {
		return batcher.Response{}, out[0].Err
	}
	return out[0], nil
}

// stream writes resp's text to w word by word at the configured pace, then
// each of its tool calls as OpenAI streams one: a first piece with the
// call's index, id and name, then its arguments. Without the calls, a
// streamed caller would get finish reason tool_calls and no call to make.
func (p *Provider) stream(ctx context.Context, w batcher.DeltaWriter, resp *batcher.Response) error {
	text := resp.Text
	first := p.cfg.TimeToFirstToken
	if first == 0 {
		first = p.cfg.BaseLatency
	}
	every := p.cfg.PerToken
	if p.cfg.TokensPerSecond > 0 {
		every = time.Duration(float64(time.Second) / p.cfg.TokensPerSecond)
	}
	if err := wait(ctx, first); err != nil {
		return err
	}
	var t *time.Timer
	for i := 0; text != ""; i++ {
		word := text
		if j := strings.IndexByte(text[1:], ' '); j >= 0 {
			word = text[:j+1] // the space goes with the next word
		}
		text = text[len(word):]
		if i > 0 && every > 0 {
			if t == nil {
				t = time.NewTimer(every)
				defer t.Stop()
			} else {
				t.Reset(every)
			}
			select {
			case <-t.C:
			case <-ctx.Done():
				return ctxError(ctx.Err())
			}
		}
		if err := w.WriteDelta(&batcher.Delta{Text: word}); err != nil {
			if e := ctx.Err(); e != nil {
				return ctxError(e)
			}
			return err // nobody awaits the answer any more
		}
	}
	for i, c := range resp.ChatOutput().ToolCalls {
		for _, d := range []batcher.ToolCallDelta{{Index: int32(i), ID: c.ID, Name: c.Name}, {Index: int32(i), Arguments: c.Arguments}} {
			if err := w.WriteDelta(&batcher.Delta{ToolCalls: []batcher.ToolCallDelta{d}}); err != nil {
				if e := ctx.Err(); e != nil {
					return ctxError(e)
				}
				return err
			}
		}
	}
	return nil
}
