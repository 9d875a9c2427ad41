// Package schema checks JSON documents against JSON Schemas, with the
// compiled schemas kept in a small cache: the sim checks what it generates
// and the OpenAI-compatible backend what a strict upstream answered.
//
// It wraps santhosh-tekuri/jsonschema/v6 (drafts 4 to 2020-12); a schema
// never loads anything from the network or the disk.
package schema

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// MaxCached bounds the compiled schemas a Cache keeps; past it the cache
// starts over.
const MaxCached = 1024

// Cache compiles schemas once. The zero value is ready; it is safe for
// concurrent use.
type Cache struct {
	mu sync.Mutex
	m  map[string]*jsonschema.Schema
}

// ErrInvalidSchema wraps a schema that does not compile.
var ErrInvalidSchema = errors.New("not a valid JSON Schema")

// Validate checks doc (JSON) against schema (a JSON Schema as JSON). It
// wraps ErrInvalidSchema when the schema itself is wrong.
func (c *Cache) Validate(schema, doc []byte) error {
	s, err := c.compile(schema)
	if err != nil {
		return errors.Join(ErrInvalidSchema, err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}

// Check reports whether schema (a JSON Schema as JSON) compiles, with an
// error wrapping ErrInvalidSchema when it does not: what a server that
// takes a schema checks before it answers.
// Its message is one line: the first place where the schema breaks the
// metaschema, when that is why.
func (c *Cache) Check(schema []byte) error {
	_, err := c.compile(schema)
	if err == nil {
		return nil
	}
	var sve *jsonschema.SchemaValidationError
	var ve *jsonschema.ValidationError
	if errors.As(err, &sve) && errors.As(sve.Err, &ve) {
		for len(ve.Causes) > 0 {
			ve = ve.Causes[0]
		}
		return fmt.Errorf("%w: %s", ErrInvalidSchema, ve.Error()) // "at '/type': value must be one of ..."
	}
	return fmt.Errorf("%w: %w", ErrInvalidSchema, err)
}

func (c *Cache) compile(schema []byte) (*jsonschema.Schema, error) {
	c.mu.Lock()
	s := c.m[string(schema)]
	c.mu.Unlock()
	if s != nil {
		return s, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, err
	}
	comp := jsonschema.NewCompiler()
	comp.UseLoader(noLoader{})
	if err := comp.AddResource("urn:batcher:request", doc); err != nil {
		return nil, err
	}
	if s, err = comp.Compile("urn:batcher:request"); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= MaxCached {
		c.m = make(map[string]*jsonschema.Schema)
	}
	c.m[string(schema)] = s
	c.mu.Unlock()
	return s, nil
}

// noLoader refuses every external reference: a caller's schema must not
// make the server read files or URLs.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, errors.New("external $ref " + url + " not allowed")
}
