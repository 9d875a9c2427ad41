package jobs

import (
	"context"
	"errors"
	"fmt"
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Price is a route's price table: what its provider charges per million
// tokens, online, and how much less its batch API charges.
type Price struct {
	InputPerMTok  float64 // USD per million input (prompt) tokens
	OutputPerMTok float64 // USD per million output (completion) tokens
	// BatchDiscount is the fraction of the online price the batch API
	// takes off: 0.5 is half price. 0 to 1.
	BatchDiscount float64
}

// Validate checks p; the error names the field as a route's price table
// spells it.
func (p Price) Validate() error {
	if field, problem := p.Problem(); field != "" {
		return fmt.Errorf("%s: %s", field, problem)
	}
	return nil
}

// Problem returns p's first bad field, as a route's price table spells it,
// and what is wrong with it; "" when p is good.
func (p Price) Problem() (field, problem string) {
	for _, f := range []struct {
		name string
		v    float64
	}{{"input_per_mtok", p.InputPerMTok}, {"output_per_mtok", p.OutputPerMTok}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return f.name, fmt.Sprintf("a price in USD per million tokens, at least 0, got %v", f.v)
		}
	}
	if !(p.BatchDiscount >= 0 && p.BatchDiscount <= 1) {
		return "batch_discount", fmt.Sprintf("a fraction of the online price from 0 to 1 (0.5: half price), got %v", p.BatchDiscount)
	}
	return "", ""
}

// Cost returns what in input and out output tokens cost through the given
// dispatch mode (DispatchOnline or DispatchBatchAPI), and what they would
// have cost online; in USD.
func (p Price) Cost(in, out int64, dispatch string) (cost, online float64) {
	online = (float64(in)*p.InputPerMTok + float64(out)*p.OutputPerMTok) / 1e6
	cost = online
	if dispatch == DispatchBatchAPI {
		cost = online * (1 - p.BatchDiscount)
	}
	return cost, online
}

// backendBatchAPI is a record's Backend when a provider batch API answered.
const backendBatchAPI = "batch_api"

// price fills a successful outcome's cost from its route's price table,
// and its record's cost and dispatch mode: the one place a task's cost is
// computed, for every door (items, OpenAI batch lines) and both dispatch
// modes.
func (m *Manager) price(o *Outcome, rec *Record) {
	rec.Dispatch = DispatchOnline
	if rec.Backend == backendBatchAPI {
		rec.Dispatch = DispatchBatchAPI
	}
	p, ok := (*m.prices.Load())[o.Model]
	if !ok {
		return
	}
	o.Cost, o.OnlineCost = p.Cost(int64(rec.PromptTokens), int64(rec.CompletionTokens), rec.Dispatch)
	c := o.Cost
	rec.Cost = &c
	o.Dispatch = rec.Dispatch
}

// jobMetrics are the counters of what the jobs' tasks did, counted when
// the store records their outcomes (so a task redone after a kill counts
// once): batcher_cost_total (USD at the routes' price tables, by route and
// dispatch mode), batcher_job_tasks_total (tasks that ended with an
// outcome of their own, by route and end state: pending tasks that a
// cancel or an expiry ends in bulk (Store.EndPending) carry no route and
// are not counted) and batcher_job_task_tokens_total (their tokens, by route and
// gen_ai.token.type). Unlike the gauges batcher_job_items and
// batcher_job_tokens (over the jobs listed), they only grow, so rate()
// reads them.
type jobMetrics struct {
	cost   metric.Float64Counter
	tasks  metric.Int64Counter
	tokens metric.Int64Counter
}

func newJobMetrics(mp metric.MeterProvider) (*jobMetrics, error) {
	if mp == nil {
		return nil, nil
	}
	mt := mp.Meter(meterName)
	cost, err1 := mt.Float64Counter("batcher.cost", metric.WithUnit("{USD}"),
		metric.WithDescription("What the tasks of jobs cost at their routes' price tables, in USD, by route and dispatch mode (online, batch_api)."))
	tasks, err2 := mt.Int64Counter("batcher.job.tasks", metric.WithUnit("{task}"),
		metric.WithDescription("Tasks of jobs that ended with an outcome of their own (succeeded, failed, or cancelled or expired while in flight), by route and state; pending tasks a cancel or expiry ends in bulk are not counted."))
	tokens, err3 := mt.Int64Counter("batcher.job.task.tokens", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens the ended tasks of jobs used, by route and token type (input, output)."))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	return &jobMetrics{cost: cost, tasks: tasks, tokens: tokens}, nil
}

var (
	keyRoute     = attribute.Key("batcher.route")
	keyBackend   = attribute.Key("batcher.backend")
	keyDispatch  = attribute.Key("batcher.dispatch")
	keyTaskState = attribute.Key("batcher.job.task.state")
	keyTokenType = attribute.Key("gen_ai.token.type")
)

// meterName is the instrumentation scope of the jobs' metrics.
const meterName = "github.com/batcherhq/batcher/jobs"

// recorded counts the outs that Complete recorded (DoneSeq set).
func (c *jobMetrics) recorded(outs []Outcome) {
	if c == nil {
		return
	}
	ctx := context.Background()
	for i := range outs {
		o := &outs[i]
		if o.DoneSeq == 0 {
			continue
		}
		route := keyRoute.String(o.Model)
		c.tasks.Add(ctx, 1, metric.WithAttributes(route, keyTaskState.String(o.State.String())))
		if o.TokensIn > 0 {
			c.tokens.Add(ctx, o.TokensIn, metric.WithAttributes(route, keyTokenType.String("input")))
		}
		if o.TokensOut > 0 {
			c.tokens.Add(ctx, o.TokensOut, metric.WithAttributes(route, keyTokenType.String("output")))
		}
		if o.Dispatch != "" {
			c.cost.Add(ctx, o.Cost, metric.WithAttributes(route, keyDispatch.String(o.Dispatch)))
		}
	}
}
