package jobs

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// request builds the core request of a task.
func (r *run) request(ctx context.Context, t *Task, override string) (*inflight, *batcher.Request, error) {
	spec := &r.job.Spec
	f := &inflight{task: *t}
	var ir ItemRequest
	if err := json.Unmarshal(t.Request, &ir); err != nil {
		return f, nil, fmt.Errorf("%w: stored request unreadable: %w", batcher.ErrInvalid, err) // outcome names the line
	}
	f.url, f.tier = ir.URL, ir.ServiceTier
	req := &batcher.Request{
		ID: r.id + "/" + strconv.FormatInt(t.Seq, 10),
		// The job's tenant: its items share the tenant's fair share and
		// quotas with its online requests.
		Tenant:   r.job.Tenant,
		Priority: spec.Priority,
		Input:    ir.Input,
		Params:   mergeParams(ir.Params, spec.Params),
		Metadata: ir.Metadata,
	}
	ir.setRich(req)
	switch {
	case t.Group >= 0 && t.Group < len(spec.Groups):
		g := &spec.Groups[t.Group]
		if g.Temperature != nil {
			req.Params.Temperature = g.Temperature
		}
		if t.Run < len(g.Seeds) {
			seed := g.Seeds[t.Run]
			req.Params.Seed = &seed
		}
	case t.Group == GroupJudge && spec.Judge != nil:
		prompt, err := r.judgePrompt(ctx, t, &ir)
		if err != nil {
			return f, nil, err
		}
		f.judge = prompt
		req.Params = spec.Judge.Params
		// The judge reads the runs' outputs: the item's tools and format
		// are the runs', not its own.
		(&ItemRequest{}).setRich(req)
		if op, _ := r.m.route(spec.Judge.Model); op == batcher.OpCompletion {
			req.Input = batcher.Input{Op: batcher.OpCompletion, Prompt: prompt}
		} else {
			req.Input = batcher.Input{Op: batcher.OpChat, Messages: []batcher.Message{{Role: "user", Content: prompt}}}
		}
		f.url, f.tier = "", ""
	}
	f.model = r.routeOf(t, ir.Model, override)
	req.Route = f.model
	req.Retry = r.retry(t)
	if dl := r.job.Deadline(); !dl.IsZero() {
		// The window bounds the job; one call is bounded by the core's
		// limit too, or a window past 24h would fail every item as a
		// request.timeout out of range.
		req.Timeout = min(max(time.Until(dl), time.Millisecond), batcher.MaxTimeout)
	}
	return f, req, nil
}

// routeOf is the route task t runs on: override (its group's next model)
// when set, else the judge's model for a judge task, else its group's
// model, the item's (itemModel) or the job's, the first that is set.
func (r *run) routeOf(t *Task, itemModel, override string) string {
	spec := &r.job.Spec
	model := cmp.Or(itemModel, spec.Model)
	switch {
	case t.Group >= 0 && t.Group < len(spec.Groups):
		model = cmp.Or(spec.Groups[t.Group].Model, model)
	case t.Group == GroupJudge && spec.Judge != nil:
		model = spec.Judge.Model
	}
	return cmp.Or(override, model)
}

// unrun is the inflight of a claimed task that ends without running (a
// cancel or an expiry ending the backlog): its route, URL and service
// tier as request sets them, so that its outcome is counted on its route,
// without building its request (a judge's prompt reads the store).
func (r *run) unrun(t Task) *inflight {
	f := &inflight{task: t}
	var ir ItemRequest
	// A judge task stores no request; one that does not decode goes by
	// the job's route, as its request would fail anyway.
	_ = json.Unmarshal(t.Request, &ir)
	f.url, f.tier = ir.URL, ir.ServiceTier
	f.model = r.routeOf(&t, ir.Model, t.Model)
	return f
}

// retry is a task's override of its backend's retry policy: its group's
// settings, then the job's; nil when neither sets any. A spec with only
// retry_delay keeps the backend's retry count.
func (r *run) retry(t *Task) *batcher.RetryOverride {
	spec := &r.job.Spec
	maxRetries, delay := spec.MaxRetries, spec.RetryDelay
	var factor float64
	if t.Group >= 0 && t.Group < len(spec.Groups) {
		g := &spec.Groups[t.Group]
		maxRetries = cmp.Or(g.MaxRetries, maxRetries)
		delay = cmp.Or(g.RetryDelay, delay)
		factor = g.BackoffFactor
	}
	if maxRetries == nil && delay == 0 && factor == 0 {
		return nil
	}
	o := &batcher.RetryOverride{MaxRetries: batcher.PolicyMaxRetries, InitialBackoff: delay, Factor: factor}
	if maxRetries != nil {
		o.MaxRetries = *maxRetries
	}
	return o
}

// mergeParams fills the item's unset parameters from the job's defaults.
func mergeParams(p, def batcher.Params) batcher.Params {
	if p.MaxTokens == 0 {
		p.MaxTokens = def.MaxTokens
	}
	if p.Temperature == nil {
		p.Temperature = def.Temperature
	}
	if p.TopP == nil {
		p.TopP = def.TopP
	}
	if p.Stop == nil {
		p.Stop = def.Stop
	}
	if p.Seed == nil {
		p.Seed = def.Seed
	}
	return p
}
