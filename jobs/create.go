package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"time"

	"github.com/batcherhq/batcher/batcher"
)

// layout places an input's tasks: K tasks an input, its runs group by group
// then its judge, so that Seq order is item order.
type layout struct {
	k          int64
	groupStart []int64 // offset of each group's run 0
	judge      bool
}

func layoutOf(s *Spec) layout {
	l := layout{judge: s.Judge != nil}
	for _, g := range s.Groups {
		l.groupStart = append(l.groupStart, l.k)
		l.k += int64(g.Runs)
	}
	if len(s.Groups) == 0 {
		l.k = 1
	}
	if l.judge {
		l.k++
	}
	return l
}

// judgeSeq returns the Seq of item's judge, or -1.
func (l layout) judgeSeq(item int64) int64 {
	if !l.judge {
		return -1
	}
	return item*l.k + l.k - 1
}

// Creator receives a new job's inputs. The job is VALIDATING until Finish
// queues it; Abort removes it. One goroutine uses a Creator.
type Creator struct {
	m       *Manager
	job     *Job
	lay     layout
	items   int64
	invalid int64
	buf     []Task
	// maxItems bounds the inputs: the manager's MaxItems, or the
	// tenant's quota when lower (tenantMax).
	maxItems  int64
	tenantMax bool
	// access is the creating tenant's, which Add admits every item's
	// routes with; nil: every route.
	access *batcher.Access
	// ids are the custom ids seen so far: their 128-bit hash (two seeded
	// maphash values; a false duplicate is as likely as a SHA-1 collision)
	// and line, so that a million items cost about 30 MB, not the strings.
	ids   map[[2]uint64]int64
	seeds [2]maphash.Seed
	// nextReq: the next input is a gRPC request (NextIsRequest); isReq:
	// the current one is, and requests counts them, with it.
	nextReq, isReq bool
	requests       int64
}

// createChunk is how many tasks a Creator buffers before writing them.
const createChunk = 2000

// MaxCustomIDBytes bounds an item's custom id, on every way in: a batch
// file's line and a CreateJob item alike. OpenAI's custom_id is a free
// string; 512 bytes passes real files' ids (UUIDs, paths, composite keys)
// and refuses an absurd one. The charset is batcher.CheckID's.
const MaxCustomIDBytes = 512

// Begin validates spec and creates its job, VALIDATING, with no inputs yet.
func (m *Manager) Begin(ctx context.Context, spec Spec) (*Creator, error) {
	select {
	case <-m.stop:
		return nil, ErrClosed
	default:
	}
	if err := m.validateSpec(&spec); err != nil {
		return nil, err
	}
	if err := m.validateSpecParams(&spec); err != nil {
		return nil, err
	}
	t, _ := tenantOf(ctx)
	if err := admitSpec(t.Access, &spec); err != nil {
		return nil, err
	}
	j := &Job{ID: newID("job_"), Tenant: t.Name, Spec: spec, State: StateValidating, CreatedAt: time.Now()}
	if err := m.checkOutputDir(j); err != nil {
		return nil, err
	}
	if err := m.cfg.Store.CreateJob(ctx, j, t.MaxJobs); err != nil {
		return nil, err
	}
	// Held while it is created, so that no process takes it for one
	// whose creator died (Manager.dropAbandoned).
	if err := m.cfg.Store.Hold(ctx, j.ID, m.cfg.Owner, m.cfg.Lease); err != nil {
		c := &Creator{m: m, job: j}
		c.Abort()
		return nil, err
	}
	c := &Creator{m: m, job: j, lay: layoutOf(&spec), maxItems: m.cfg.MaxItems, access: t.Access}
	if t.MaxItems > 0 && t.MaxItems < c.maxItems {
		c.maxItems, c.tenantMax = t.MaxItems, true
	}
	return c, nil
}

// Job returns the job being created.
func (c *Creator) Job() *Job { return c.job }

// Add adds one input. A bad input becomes an error line naming its line
// number (from 1), or, with FailOnInvalid, fails with ErrInvalid.
func (c *Creator) Add(ctx context.Context, customID string, req *ItemRequest) error {
	if err := c.next(); err != nil {
		return err
	}
	if customID == "" {
		customID = "item-" + strconv.FormatInt(c.items, 10)
	} else if err := c.checkID(customID); err != nil {
		return err
	} else if err := c.unique(customID); err != nil {
		return err
	}
	if err := c.admit(customID, req); err != nil {
		return err
	}
	if msg := c.check(req); msg != "" {
		return c.addInvalid(ctx, customID, msg)
	}
	spec := &c.job.Spec
	item := c.items - 1
	body := encode(req)
	base := item * c.lay.k
	if len(spec.Groups) == 0 {
		c.buf = append(c.buf, Task{Seq: base, Item: item, Group: GroupNone, CustomID: customID, Line: c.items, Request: body})
	}
	for g, grp := range spec.Groups {
		for run := range grp.Runs {
			c.buf = append(c.buf, Task{Seq: base + c.lay.groupStart[g] + int64(run), Item: item, Group: g, Run: run,
				CustomID: customID, Line: c.items, Request: body})
		}
	}
	if c.lay.judge {
		c.buf = append(c.buf, Task{Seq: c.lay.judgeSeq(item), Item: item, Group: GroupJudge, CustomID: customID,
			Line: c.items, Request: body, State: ItemWaiting})
	}
	return c.flushIfFull(ctx)
}

// AddLine adds one OpenAI batch input line.
func (c *Creator) AddLine(ctx context.Context, line []byte) error {
	id, req, err := ParseOpenAILine(line)
	if err != nil {
		if err := c.next(); err != nil {
			return err
		}
		if id == "" {
			id = "line-" + strconv.FormatInt(c.items, 10)
		} else if err := c.unique(id); err != nil {
			return err
		}
		return c.addInvalid(ctx, id, err.Error())
	}
	return c.Add(ctx, id, req)
}

// AddInvalid records an input the caller could not read as an error line.
func (c *Creator) AddInvalid(ctx context.Context, customID, msg string) error {
	if err := c.next(); err != nil {
		return err
	}
	if customID != "" {
		if err := c.checkID(customID); err != nil {
			return err
		}
		if err := c.unique(customID); err != nil {
			return err
		}
	}
	return c.addInvalid(ctx, customID, msg)
}

// checkID holds a custom id to the rule on ids every door applies
// (batcher.CheckID, at most MaxCustomIDBytes): an id that breaks it
// cannot label the item's result, so it fails the call with ErrInvalid
// naming the input. ParseOpenAILine refuses a line's, which then gets an
// error line of its own; a gRPC item's id comes here alone.
func (c *Creator) checkID(customID string) error {
	if ve := batcher.CheckID(c.idField(), customID, MaxCustomIDBytes); ve != nil {
		return kindErr(ErrInvalid, "%s: %s %q: %s", c.at(), ve.Field, cut(customID), ve.Reason)
	}
	return nil
}

// unique records the custom id of the current line, and fails with
// ErrInvalid naming both lines when an earlier line had it: as in OpenAI's
// Batch API, custom ids must be unique in a job, since they are how a
// caller matches results to inputs.
func (c *Creator) unique(id string) error {
	if c.ids == nil {
		c.ids = map[[2]uint64]int64{}
		c.seeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
	}
	k := [2]uint64{maphash.String(c.seeds[0], id), maphash.String(c.seeds[1], id)}
	if first, ok := c.ids[k]; ok {
		return kindErr(ErrInvalid, "%s: %s %q is already used by %s: ids must be unique in a job", c.at(), c.idField(), cut(id), c.name(first))
	}
	c.ids[k] = c.ref()
	return nil
}

// NextIsRequest says that the next input (Add or AddInvalid) is a gRPC
// caller's request, not a batch file's line: errors name it as its caller
// sent it, by its index among JobItems.requests counted from 0 over the
// whole stream ("requests[3]") and its "id", where a line is named by its
// number from 1 ("line 4") and its "custom_id".
func (c *Creator) NextIsRequest() { c.nextReq = true }

// at names the current input as its caller sent it.
func (c *Creator) at() string { return c.name(c.ref()) }

// ref is the current input as the ids map keeps it: a line's number, or
// minus one more than a request's index.
func (c *Creator) ref() int64 {
	if c.isReq {
		return -c.requests
	}
	return c.items
}

// name names the input ref refers to.
func (c *Creator) name(ref int64) string {
	if ref < 0 {
		return "requests[" + strconv.FormatInt(-ref-1, 10) + "]"
	}
	return "line " + strconv.FormatInt(ref, 10)
}

// idField is what the current input's caller calls its id.
func (c *Creator) idField() string {
	if c.isReq {
		return "id"
	}
	return "custom_id"
}

func (c *Creator) next() error {
	if c.items >= c.maxItems {
		if c.tenantMax {
			return quotaError(c.job.Tenant, QuotaItemsPerJob, c.maxItems)
		}
		return kindErr(ErrTooManyItems, "more than %d items (the server's limit)", c.maxItems)
	}
	c.items++
	c.isReq, c.nextReq = c.nextReq, false
	if c.isReq {
		c.requests++
	}
	return nil
}

func (c *Creator) addInvalid(ctx context.Context, customID, msg string) error {
	if c.job.Spec.FailOnInvalid {
		if customID != "" {
			return kindErr(ErrInvalid, "%s (%s %q): %s", c.at(), c.idField(), cut(customID), msg)
		}
		return kindErr(ErrInvalid, "%s: %s", c.at(), msg)
	}
	msg = fmt.Sprintf("%s: %s", c.at(), msg)
	c.invalid++
	item := c.items - 1
	c.buf = append(c.buf, Task{Seq: item * c.lay.k, Item: item, Group: GroupNone, CustomID: customID, Line: c.items,
		State: ItemFailed, Result: errorRecord(CodeInvalidRequest, "%s", msg)})
	return c.flushIfFull(ctx)
}

// admitSpec admits every route and the priority that spec names for the
// tenant (batcher.Access.Admit): the default model, each run group's model
// and next_model, the judge's model. In lower mode the spec's priority is
// lowered in place. The error wraps batcher.ErrForbidden and names the
// field.
func admitSpec(a *batcher.Access, spec *Spec) error {
	if a.Unrestricted() {
		return nil
	}
	admit := func(field, route string) error {
		if route == "" {
			return nil
		}
		r := batcher.Request{Route: route, Priority: spec.Priority}
		if err := a.Admit(&r); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		return nil
	}
	p, err := a.CapPriority(spec.Priority)
	if err != nil {
		return fmt.Errorf("spec.priority: %w", err)
	}
	spec.Priority = p
	if err := admit("spec.model", spec.Model); err != nil {
		return err
	}
	for i, g := range spec.Groups {
		field := fmt.Sprintf("spec.run_groups[%d]", i)
		if err := admit(field+".model", g.Model); err != nil {
			return err
		}
		if err := admit(field+".next_model", g.NextModel); err != nil {
			return err
		}
	}
	if spec.Judge != nil {
		return admit("spec.judge.model", spec.Judge.Model)
	}
	return nil
}

// admit admits each route the item names or runs on, with the job's
// priority, for the creating tenant. A refused item refuses the whole job
// (the caller aborts it): the error wraps batcher.ErrForbidden and names
// the line and the item's custom id.
func (c *Creator) admit(customID string, req *ItemRequest) error {
	if c.access.Unrestricted() {
		return nil
	}
	spec := &c.job.Spec
	routes := []string{cmp.Or(req.Model, spec.Model)}
	for _, g := range spec.Groups {
		routes = append(routes, cmp.Or(g.Model, req.Model, spec.Model))
	}
	for _, route := range routes {
		if route == "" {
			continue // check names the missing model
		}
		r := batcher.Request{Route: route, Priority: spec.Priority}
		if err := c.access.Admit(&r); err != nil {
			return fmt.Errorf("%s (%s %q): %w", c.at(), c.idField(), cut(customID), err)
		}
	}
	return nil
}

// check returns why req cannot run, or "".
func (c *Creator) check(req *ItemRequest) string {
	spec := &c.job.Spec
	base := req.Model
	if base == "" {
		base = spec.Model
	}
	models, groups := []string{base}, []*Group{nil}
	if len(spec.Groups) > 0 {
		models, groups = models[:0], groups[:0]
		for i := range spec.Groups {
			models = append(models, cmp.Or(spec.Groups[i].Model, base))
			groups = append(groups, &spec.Groups[i])
		}
	}
	for i, mdl := range models {
		if mdl == "" {
			return "model: must be set (in the item, the job's spec or its run group)"
		}
		ri, ok := c.m.routeInfo(mdl)
		if !ok {
			return fmt.Sprintf("model: unknown model %q", cut(mdl))
		}
		if ri.Op != req.Input.Op {
			return fmt.Sprintf("model %q serves %s requests, not %s", cut(mdl), ri.Op, req.Input.Op)
		}
		// The same rule as Submit's, now rather than when the item runs:
		// a parameter out of range, or a field the model's backends
		// cannot honour, is refused by name and limit. The spec's
		// defaults apply as they will when it runs (and were checked on
		// their own by Begin).
		r := req.coreRequest(mdl)
		r.Params = mergeParams(r.Params, spec.Params)
		if err := batcher.Validate(r, ri); err != nil {
			return fmt.Sprintf("model %q: %s", cut(mdl), spelled(err, req.URL))
		}
		if g := groups[i]; g != nil && (g.Temperature != nil || len(g.Seeds) > 0) {
			// The group's temperature and seeds, as request sets them
			// when the item runs: refused now, naming the group.
			if g.Temperature != nil {
				r.Params.Temperature = g.Temperature
			}
			if len(g.Seeds) > 0 {
				r.Params.Seed = &g.Seeds[0]
			}
			if err := batcher.Validate(r, ri); err != nil {
				return fmt.Sprintf("spec.run_groups[%d] on model %q: %s", i, cut(mdl), spelled(err, req.URL))
			}
		}
	}
	return ""
}

func (c *Creator) flushIfFull(ctx context.Context) error {
	if len(c.buf) < createChunk {
		return nil
	}
	return c.flush(ctx)
}

func (c *Creator) flush(ctx context.Context) error {
	if len(c.buf) == 0 {
		return nil
	}
	err := c.m.cfg.Store.AddTasks(ctx, c.job.ID, c.buf)
	c.buf = c.buf[:0]
	return err
}

// Finish writes the last inputs and queues the job. An empty job fails with
// ErrEmpty and is removed.
func (c *Creator) Finish(ctx context.Context) (*Job, error) {
	if c.items == 0 {
		c.Abort()
		return nil, fmt.Errorf("%w: send at least one item after the spec", ErrEmpty)
	}
	if err := c.flush(ctx); err != nil {
		return nil, err
	}
	if err := c.m.cfg.Store.Transition(ctx, c.job.ID, []State{StateValidating}, StateQueued, ""); err != nil {
		return nil, err
	}
	c.m.nudge()
	return c.m.cfg.Store.GetJob(ctx, c.job.ID)
}

// Abort removes the job being created.
func (c *Creator) Abort() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.m.cfg.Store.DeleteJob(ctx, c.job.ID); err != nil && !errors.Is(err, ErrNotFound) {
		c.m.cfg.Logger.Error("jobs: removing an aborted job", "job", c.job.ID, "err", err)
	}
}

// Items returns the inputs added so far and how many were invalid.
func (c *Creator) Items() (items, invalid int64) { return c.items, c.invalid }
