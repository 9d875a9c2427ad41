package schema

import (
	"errors"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	var c Cache
	s := []byte(`{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}`)
	if err := c.Validate(s, []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{`{}`, `{"a":"x"}`, `{"a":1,"b":2}`, `[1]`} {
		if err := c.Validate(s, []byte(doc)); err == nil {
			t.Errorf("%s validated", doc)
		}
	}
	if err := c.Validate([]byte(`{"type":5}`), []byte(`{}`)); !errors.Is(err, ErrInvalidSchema) {
		t.Errorf("bad schema: %v", err)
	}
	if err := c.Validate([]byte(`{"$ref":"file:///etc/passwd"}`), []byte(`{}`)); !errors.Is(err, ErrInvalidSchema) {
		t.Errorf("external ref: %v", err)
	}
}

// Check says where a schema breaks the metaschema, in one line.
func TestCheck(t *testing.T) {
	var c Cache
	if err := c.Check([]byte(`{"type":"object"}`)); err != nil {
		t.Fatal(err)
	}
	for schema, want := range map[string]string{
		`{"type":"nonsense"}`:                  "not a valid JSON Schema: at '/type': value must be one of",
		`{"$ref":"file:///etc/passwd"}`:        "not a valid JSON Schema: ",
		`{"properties":{"a":{"minimum":"x"}}}`: "not a valid JSON Schema: at '/properties/a/minimum': got string, want number",
	} {
		err := c.Check([]byte(schema))
		if !errors.Is(err, ErrInvalidSchema) || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Check(%s) = %v, want one line starting %q", schema, err, want)
		}
	}
}
