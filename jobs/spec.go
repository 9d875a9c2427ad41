package jobs

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/batcherhq/batcher/batcher"
	"github.com/batcherhq/batcher/internal/fieldname"
)

// validateSpecParams checks the spec's default parameters, and the
// judge's, by the core's rule (batcher.ValidateParams) on each model
// they may run on, naming the spec's field: a bad default is one refusal,
// not an error line per item. With no model in the spec (items name
// theirs) the ranges alone are checked now, and each item's model when
// it is added.
func (m *Manager) validateSpecParams(s *Spec) error {
	check := func(field string, p *batcher.Params, models ...string) error {
		infos := []batcher.RouteInfo{{Features: batcher.AllFeatures}}
		for _, mdl := range models {
			if ri, ok := m.routeInfo(mdl); ok && mdl != "" {
				infos = append(infos, ri)
			}
		}
		if len(infos) > 1 {
			infos = infos[1:]
		}
		for _, ri := range infos {
			if err := batcher.ValidateParams(p, ri); err != nil {
				var ve *batcher.ValidationError
				if errors.As(err, &ve) {
					return kindErr(ErrInvalid, "%s.%s: %s", field, fieldname.Proto(ve.Field), ve.Reason)
				}
				return kindErr(ErrInvalid, "%s: %w", field, err)
			}
		}
		return nil
	}
	models := []string{s.Model}
	for _, g := range s.Groups {
		models = append(models, g.Model)
	}
	if err := check("spec", &s.Params, models...); err != nil {
		return err
	}
	if s.Judge != nil {
		return check("spec.judge", &s.Judge.Params, s.Judge.Model)
	}
	return nil
}

// badSpec is an ErrInvalid naming the spec's field at fault.
func badSpec(field, format string, args ...any) error {
	return kindErr(ErrInvalid, "%s: %s", field, fmt.Sprintf(format, args...))
}

// validateSpec checks a spec, naming the field at fault.
func (m *Manager) validateSpec(s *Spec) error {
	if len(s.Name) > 256 {
		return badSpec("spec.name", "at most 256 bytes")
	}
	if err := CheckMetadata("spec.metadata", s.Metadata, MaxSpecMetadata); err != nil {
		return err
	}
	if err := s.addTags(); err != nil {
		return err
	}
	if s.Kind != "" && s.Kind != KindOpenAIBatch {
		return badSpec("spec.kind", "%q or empty, got %q", KindOpenAIBatch, cut(s.Kind))
	}
	if s.Model != "" {
		if _, ok := m.route(s.Model); !ok {
			return badSpec("spec.model", "unknown model %q", cut(s.Model))
		}
	}
	switch s.Priority {
	case batcher.PriorityNormal:
		s.Priority = batcher.PriorityDeferrable
	case batcher.PriorityLow, batcher.PriorityDeferrable:
	default:
		return badSpec("spec.priority", "must be LOW or DEFERRABLE, got %s", s.Priority)
	}
	if s.MaxRetries != nil && (*s.MaxRetries < 0 || *s.MaxRetries > 100) {
		return badSpec("spec.max_retries", "0 to 100, got %d", *s.MaxRetries)
	}
	if s.RetryDelay < 0 || s.RetryDelay > time.Hour {
		return badSpec("spec.retry_delay", "0 to 1h, got %v", s.RetryDelay)
	}
	if s.ConcurrentRequests < 0 || s.ConcurrentRequests > 100_000 {
		return badSpec("spec.concurrent_requests", "0 to 100000, got %d", s.ConcurrentRequests)
	}
	if s.CompletionWindow < 0 {
		return badSpec("spec.completion_window", "must not be negative, got %v", s.CompletionWindow)
	}
	if len(s.Groups) > MaxGroups {
		return badSpec("spec.run_groups", "at most %d", MaxGroups)
	}
	names := map[string]bool{}
	for i := range s.Groups {
		if err := m.validateGroup(i, &s.Groups[i], names); err != nil {
			return err
		}
	}
	if err := m.validateDispatch(s); err != nil {
		return err
	}
	if err := m.validateOutputDir(s.OutputDir); err != nil {
		return err
	}
	if s.RPM < 0 {
		return badSpec("spec.requests_per_minute", "must not be negative, got %d", s.RPM)
	}
	if s.TPM < 0 {
		return badSpec("spec.tokens_per_minute", "must not be negative, got %d", s.TPM)
	}
	if jd := s.Judge; jd != nil {
		if _, ok := m.route(jd.Model); !ok {
			return badSpec("spec.judge.model", "unknown model %q", cut(jd.Model))
		}
		if err := checkJudgeTemplate(s); err != nil {
			return badSpec("spec.judge.prompt_template", "%v", err)
		}
	}
	return nil
}

// validateGroup checks run group i, g, whose name must not be in names
// (the earlier groups'), and fills its name and runs when unset.
func (m *Manager) validateGroup(i int, g *Group, names map[string]bool) error {
	field := fmt.Sprintf("spec.run_groups[%d]", i)
	if g.Name == "" {
		g.Name = fmt.Sprintf("group%d", i)
	}
	if names[g.Name] || g.Name == "judge" {
		return badSpec(field+".name", "%q used twice (or reserved)", cut(g.Name))
	}
	names[g.Name] = true
	if g.Runs == 0 {
		g.Runs = 1
	}
	if g.Runs < 0 || g.Runs > MaxGroupRuns {
		return badSpec(field+".runs", "1 to %d, got %d", MaxGroupRuns, g.Runs)
	}
	for _, mdl := range []string{g.Model, g.NextModel} {
		if _, ok := m.route(mdl); mdl != "" && !ok {
			return badSpec(field, "unknown model %q", cut(mdl))
		}
	}
	// Written so that NaN fails too: it passed "< 0 || > 2" and then
	// failed the spec's JSON encoding, an INTERNAL answer to bad input.
	if t := g.Temperature; t != nil && !(*t >= 0 && *t <= 2) {
		return badSpec(field+".temperature", "0 to 2, got %v", *t)
	}
	if g.Delay < 0 || g.Delay > time.Hour {
		return badSpec(field+".delay", "0 to 1h, got %v", g.Delay)
	}
	if g.MaxRetries != nil && (*g.MaxRetries < 0 || *g.MaxRetries > 100) {
		return badSpec(field+".max_retries", "0 to 100, got %d", *g.MaxRetries)
	}
	if g.RetryDelay < 0 || g.RetryDelay > time.Hour {
		return badSpec(field+".retry_delay", "0 to 1h, got %v", g.RetryDelay)
	}
	if f := g.BackoffFactor; f != 0 && !(f >= 1 && f <= batcher.MaxBackoffFactor) {
		return badSpec(field+".backoff_factor", "0 (the backend's) or 1 to %d, got %v", batcher.MaxBackoffFactor, f)
	}
	return nil
}

// addTags adds s.Tags to s.Metadata, in a new map (the caller's is its
// own), once Metadata is checked.
func (s *Spec) addTags() error {
	if len(s.Tags) == 0 {
		return nil
	}
	md := make(map[string]string, len(s.Metadata)+len(s.Tags))
	for k, v := range s.Metadata {
		md[k] = v
	}
	for k, v := range s.Tags {
		if !strings.HasPrefix(k, ReservedMetadataPrefix) {
			return badSpec("spec.tags", "key %q: must begin with %q", cut(k), ReservedMetadataPrefix)
		}
		md[k] = v
	}
	s.Metadata, s.Tags = md, nil
	return nil
}
