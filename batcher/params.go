package batcher

import "encoding/json"

// RichParams returns a copy of p's rich parameters: the zero ones when
// p.Rich is nil.
func (p *Params) RichParams() RichParams { return *p.rich() }

// MutableRich returns p.Rich, first setting it to new zero parameters when
// it is nil: for a caller that sets the rich parameters one by one.
func (p *Params) MutableRich() *RichParams {
	if p.Rich == nil {
		p.Rich = new(RichParams)
	}
	return p.Rich
}

// paramsJSON is Params' JSON form, which jobs store (an item's request, a
// job's and a judge's defaults): flat, every field under its Go name, as
// encoding/json wrote Params before the rich parameters moved behind
// Params.Rich. So a job stored before that move loads with every
// parameter, and one stored since loads in a binary from before it. The
// embedded RichParams' fields encode at the top level, in the order they
// had in Params.
type paramsJSON struct {
	MaxTokens   int32
	Temperature *float32
	TopP        *float32
	Stop        []string
	Seed        *int64
	RichParams
}

// MarshalJSON encodes p in its flat form (paramsJSON).
func (p Params) MarshalJSON() ([]byte, error) {
	j := paramsJSON{MaxTokens: p.MaxTokens, Temperature: p.Temperature, TopP: p.TopP, Stop: p.Stop, Seed: p.Seed}
	if p.Rich != nil {
		j.RichParams = *p.Rich
	}
	return json.Marshal(&j)
}

// UnmarshalJSON decodes p's flat form (paramsJSON), leaving p.Rich nil
// when it sets no rich parameter.
func (p *Params) UnmarshalJSON(b []byte) error {
	// Fields the JSON leaves out keep their values, as without this method.
	j := paramsJSON{MaxTokens: p.MaxTokens, Temperature: p.Temperature, TopP: p.TopP, Stop: p.Stop, Seed: p.Seed}
	if p.Rich != nil {
		j.RichParams = *p.Rich
	}
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*p = Params{MaxTokens: j.MaxTokens, Temperature: j.Temperature, TopP: j.TopP, Stop: j.Stop, Seed: j.Seed}
	if rp := j.RichParams; !rp.IsZero() {
		p.Rich = &rp
	}
	return nil
}
