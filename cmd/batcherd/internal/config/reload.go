package config

import (
	"reflect"
	"strings"

	"github.com/batcherhq/batcher/batcher"
)

// CoreRoutes returns the core's routes of a validated configuration, for
// batcher.Batcher.SetRoutes.
func (c *Config) CoreRoutes() []batcher.Route {
	out := make([]batcher.Route, len(c.Routes))
	for i := range c.Routes {
		out[i] = c.Routes[i].coreRoute()
	}
	return out
}

// NeedsRestart returns the top-level settings (their YAML names) in which
// next differs from c other than those a reload applies: the routes. The
// files the security settings name (certificates, tenants, JWKS) reload
// on their own; a change to the settings themselves, as to the backends,
// needs a restart.
func (c *Config) NeedsRestart(next *Config) []string {
	var out []string
	a, b := reflect.ValueOf(c).Elem(), reflect.ValueOf(next).Elem()
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "routes" || name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			out = append(out, name)
		}
	}
	return out
}
